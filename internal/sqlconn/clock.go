package sqlconn

// The database's clock in microseconds since the Unix epoch, per dialect,
// as an SQL expression. Each is evaluated once per statement.
const (
	// PostgreSQL: clock_timestamp() is the real time; now() would be the
	// start of the transaction. The scalar subquery makes it one value
	// per statement; a statement that needs the clock twice reads it
	// once, in a FROM item, so both uses see one instant.
	nowPostgres = `(SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)`
	// SQLite: 'now' is fixed for the duration of one statement;
	// unixepoch('subsec') (SQLite 3.42+) has millisecond resolution,
	// CURRENT_TIMESTAMP only seconds. Rounded to whole milliseconds so
	// the float never leaks into the integer.
	nowSQLite = `(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)`
	// MySQL/MariaDB: UTC_TIMESTAMP(6) is the statement's start with
	// microseconds; counting from 1970 in UTC involves no time zone, so
	// no daylight-saving ambiguity (UNIX_TIMESTAMP(NOW(6)) has one).
	nowMySQL = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`
)

// NowMicros returns d's SQL expression for the database's clock in
// microseconds since the Unix epoch, or "" for an unknown dialect. The
// heartbeat store stamps beats with it, so every statement comparing
// against a beat must use it too.
func NowMicros(d Dialect) string {
	switch d {
	case Postgres:
		return nowPostgres
	case SQLite:
		return nowSQLite
	case MySQL:
		return nowMySQL
	}
	return ""
}

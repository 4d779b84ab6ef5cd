package sqlstore

import (
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// schemaVersion is the version of the tables this code reads and
// writes. Open migrates older tables up to it and refuses newer ones.
const schemaVersion = 1

// The database's clock in microseconds since the Unix epoch, per dialect,
// as an SQL expression. Each is evaluated once per statement.
const (
	// PostgreSQL: clock_timestamp() is the real time; now() would be the
	// start of the transaction. The scalar subquery makes it one value
	// per statement.
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

// clockResolution is the resolution of each dialect's {now}.
var clockResolution = map[Dialect]time.Duration{Postgres: time.Microsecond, SQLite: time.Millisecond, MySQL: time.Microsecond}

// statements are one dialect's SQL for one table. Placeholders are $n
// for PostgreSQL and ? for the others.
type statements struct {
	migrations [][]string // migrations[v] takes version v to v+1, run by migrate
	drop       []string   // both tables, for tests

	// reserve, if set, takes the next epoch in its own statement and
	// returns it (a row, or MySQL's LAST_INSERT_ID); register then
	// upserts with it. If empty, register does both in one statement.
	reserve  string
	register string // (node[, epoch[, epoch]]) upsert, returns the epoch if reserve is empty
	beat     string // (node, epoch)
	list     string // node, epoch, seq, age in microseconds
	evict    string // (node, epoch, seq)
	dereg    string // (node, epoch)
	now      string // the database's clock, microseconds since 1970
}

// newStatements returns d's statements for table (validated by Config).
func newStatements(d Dialect, table string) statements {
	now := map[Dialect]string{Postgres: nowPostgres, SQLite: nowSQLite, MySQL: nowMySQL}[d]
	r := strings.NewReplacer("{t}", sqlconn.QuoteIdent(d, table), "{m}", sqlconn.QuoteIdent(d, table+"_meta"), "{now}", now)
	var s statements
	switch d {
	case Postgres:
		s = statements{
			migrations: [][]string{{
				`CREATE TABLE IF NOT EXISTS {t} (node TEXT PRIMARY KEY, epoch BIGINT NOT NULL, seq BIGINT NOT NULL, beat_us BIGINT NOT NULL)`,
			}},
			drop: []string{`DROP TABLE IF EXISTS {t}`, `DROP TABLE IF EXISTS {m}`},
			register: `WITH e AS (UPDATE {m} SET last_epoch = GREATEST(last_epoch + 1, {now}) WHERE id = 1 RETURNING last_epoch) ` +
				`INSERT INTO {t} (node, epoch, seq, beat_us) SELECT $1, e.last_epoch, 0, {now} FROM e ` +
				`ON CONFLICT (node) DO UPDATE SET epoch = EXCLUDED.epoch, seq = 0, beat_us = EXCLUDED.beat_us RETURNING epoch`,
			beat:  `UPDATE {t} SET beat_us = {now}, seq = seq + 1 WHERE node = $1 AND epoch = $2`,
			list:  `SELECT node, epoch, seq, GREATEST({now} - beat_us, 0) FROM {t} ORDER BY node`,
			evict: `DELETE FROM {t} WHERE node = $1 AND epoch = $2 AND seq = $3`,
			dereg: `DELETE FROM {t} WHERE node = $1 AND epoch = $2`,
		}
	case SQLite:
		s = statements{
			migrations: [][]string{{
				`CREATE TABLE IF NOT EXISTS {t} (node TEXT PRIMARY KEY NOT NULL, epoch INTEGER NOT NULL, seq INTEGER NOT NULL, beat_us INTEGER NOT NULL)`,
			}},
			drop:     []string{`DROP TABLE IF EXISTS {t}`, `DROP TABLE IF EXISTS {m}`},
			reserve:  `UPDATE {m} SET last_epoch = max(last_epoch + 1, {now}) WHERE id = 1 RETURNING last_epoch`,
			register: `INSERT INTO {t} (node, epoch, seq, beat_us) VALUES (?, ?, 0, {now}) ON CONFLICT (node) DO UPDATE SET epoch = excluded.epoch, seq = 0, beat_us = excluded.beat_us`,
			beat:     `UPDATE {t} SET beat_us = {now}, seq = seq + 1 WHERE node = ? AND epoch = ?`,
			list:     `SELECT node, epoch, seq, max({now} - beat_us, 0) FROM {t} ORDER BY node`,
			evict:    `DELETE FROM {t} WHERE node = ? AND epoch = ? AND seq = ?`,
			dereg:    `DELETE FROM {t} WHERE node = ? AND epoch = ?`,
		}
	case MySQL:
		s = statements{
			migrations: [][]string{{
				// utf8mb4_bin: node names compare byte for byte, as in
				// the other dialects (the default collation ignores case).
				"CREATE TABLE IF NOT EXISTS {t} (node VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, " +
					"epoch BIGINT NOT NULL, seq BIGINT NOT NULL, beat_us BIGINT NOT NULL) ENGINE=InnoDB",
			}},
			drop: []string{`DROP TABLE IF EXISTS {t}`, `DROP TABLE IF EXISTS {m}`},
			// LAST_INSERT_ID(x) hands x back in the statement's result
			// (the driver's LastInsertId), for this connection only.
			reserve:  `UPDATE {m} SET last_epoch = LAST_INSERT_ID(GREATEST(last_epoch + 1, {now})) WHERE id = 1`,
			register: `INSERT INTO {t} (node, epoch, seq, beat_us) VALUES (?, ?, 0, {now}) ON DUPLICATE KEY UPDATE epoch = ?, seq = 0, beat_us = {now}`,
			beat:     `UPDATE {t} SET beat_us = {now}, seq = seq + 1 WHERE node = ? AND epoch = ?`,
			list:     `SELECT node, epoch, seq, GREATEST({now} - beat_us, 0) FROM {t} ORDER BY node`,
			evict:    `DELETE FROM {t} WHERE node = ? AND epoch = ? AND seq = ?`,
			dereg:    `DELETE FROM {t} WHERE node = ? AND epoch = ?`,
		}
	}
	for _, step := range s.migrations {
		for i := range step {
			step[i] = r.Replace(step[i])
		}
	}
	for i := range s.drop {
		s.drop[i] = r.Replace(s.drop[i])
	}
	s.reserve = r.Replace(s.reserve)
	s.register = r.Replace(s.register)
	s.beat = r.Replace(s.beat)
	s.list = r.Replace(s.list)
	s.evict = r.Replace(s.evict)
	s.dereg = r.Replace(s.dereg)
	s.now = "SELECT " + now
	return s
}

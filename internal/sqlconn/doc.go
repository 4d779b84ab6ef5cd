// Package sqlconn is the SQL plumbing shared by cloudbus's SQL stores
// (heartbeat/sqlstore, and refnode's record store): database URLs for
// SQLite, PostgreSQL and MySQL/MariaDB, connection pools opened from them
// with one set of settings, password masking, and versioned tables
// created under a lock that spans processes. It is internal: each store
// exports its own concern, and this package is how they agree on what a
// URL means.
//
// # URLs and credentials
//
// [ParseURL] reads the URL forms every cloudbus SQL store accepts
// (sqlite:PATH or a file: URI, postgres:// or a key=value string,
// mysql:// or go-sql-driver/mysql's DSN) into a [URL]: the [Dialect], the
// driver's DSN (never shown), the URL masked ("xxxxx" for each password)
// and the passwords, so that [URL.Scrub] and [URL.Fail] can remove them
// from a driver's error text. [MaskURL] masks a raw URL for a log line.
// Errors of this package carry no package prefix: the store that returns
// them adds its own ("sqlstore: ...").
//
// # Pools
//
// [Open] opens a [Pool] without connecting. Every SQLite connection sets
// busy_timeout (default 5 s: a writer waits for another's write lock
// instead of failing with "database is locked"), journal_mode=WAL
// (readers never block the writer) and synchronous=NORMAL, and begins
// transactions with BEGIN IMMEDIATE; sqlite:/path/x.db becomes
//
//	file:/path/x.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate
//
// An in-memory SQLite database is refused: it would be private to one
// connection. PostgreSQL goes through pgx's database/sql driver, MySQL
// through go-sql-driver/mysql; the pool is capped at
// [Config.MaxOpenConns] (default 4). Stores of one process may share a
// Pool, but the heartbeat store needs one of its own, so that no beat
// waits for a connection behind other work (see heartbeat/sqlstore).
// Whoever opened a Pool closes it, after the stores.
//
// # Versioned tables
//
// A [Schema] names a meta table (one row: id 1, the version, and any
// counters of the owner) and the migrations from each version to the
// next. [Schema.Migrate] takes the schema lock (PostgreSQL
// pg_advisory_xact_lock, SQLite BEGIN IMMEDIATE, MySQL GET_LOCK), creates
// what is missing and runs the migrations from the stored version up, so
// that nodes starting together do it once; it refuses tables of a newer
// version than the code knows. [QuoteIdent] and [Rebind] write the
// statements for each dialect.
//
// # Testing
//
// The tests run on SQLite always, in a temporary directory, on PostgreSQL
// when CLOUDBUS_POSTGRES_DSN is set and on MySQL when CLOUDBUS_MYSQL_DSN
// is set (see internal/testenv); without them those tests skip, naming
// the variable, and under CI=true they fail instead. Each test uses its
// own random table names and drops its tables at the end.
package sqlconn

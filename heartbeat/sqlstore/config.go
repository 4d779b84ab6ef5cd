package sqlstore

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// Dialect is the SQL dialect of a database: it picks the driver and the
// statements. The zero value, [DialectAuto], lets [Open] and [OpenDB]
// infer it from [Config.URL]. Its String method returns "sqlite",
// "postgres", "mysql", "auto", or "Dialect(n)" for an unknown value.
type Dialect = sqlconn.Dialect

// The dialects.
const (
	// DialectAuto infers the dialect from the URL's form (see
	// [Config.URL]).
	DialectAuto = sqlconn.Auto
	// SQLite is an embedded database in one file (modernc.org/sqlite, pure
	// Go): the processes of one machine share heartbeats through it.
	SQLite = sqlconn.SQLite
	// Postgres is PostgreSQL (github.com/jackc/pgx/v5 through its
	// database/sql driver), version 10 or later.
	Postgres = sqlconn.Postgres
	// MySQL is MySQL 5.7 or later, or MariaDB 10.3 or later
	// (github.com/go-sql-driver/mysql).
	MySQL = sqlconn.MySQL
)

// DefaultTable is the default name of the heartbeat table.
const DefaultTable = "cloudbus_heartbeat"

// DefaultMaxOpenConns is the default cap on the connection pool [Open]
// creates. A node makes one or two small statements per heartbeat
// interval, so a handful of connections is plenty, and a small cap
// matters: PostgreSQL allows 100 connections in all by default, shared by
// every node and every other client.
const DefaultMaxOpenConns = sqlconn.DefaultMaxOpenConns

// Config configures [Open] and [OpenDB]. Only URL is required (and only
// by Open); every other zero field takes the default written beside it.
type Config struct {
	// URL names the database. Its form tells the dialect, unless Dialect
	// is set:
	//
	//	sqlite:/var/lib/cloudbus/heartbeat.db     SQLite, absolute path
	//	sqlite:heartbeat.db                       SQLite, relative path
	//	file:/var/lib/cloudbus/heartbeat.db?...   SQLite URI, as modernc.org/sqlite takes it
	//	postgres://user:password@host:5432/db?sslmode=disable   (or postgresql://)
	//	mysql://user:password@host:3306/db?tls=true
	//	user:password@tcp(host:3306)/db?parseTime=true          go-sql-driver/mysql's DSN
	//
	// A go-sql-driver/mysql DSN is recognized by its tcp(...) or unix(...)
	// address; other forms of it need Dialect set to MySQL. Query
	// parameters are passed to the driver. With Dialect set to
	// Postgres, a key=value connection string ("host=... password=...")
	// is accepted too. The password never appears in logs or errors: see
	// [Store.MaskedURL]. [OpenDB] never connects with URL: if set, it
	// names the database the caller's pool reaches, for the dialect,
	// errors and logs.
	URL string

	// Dialect forces the dialect instead of inferring it from URL; [OpenDB]
	// requires it or URL. Default: [DialectAuto].
	Dialect Dialect

	// Table is the heartbeat table's name: lower-case letters, digits and
	// underscores, at most 56 characters, optionally qualified by a
	// schema (PostgreSQL), database (MySQL) or attached database (SQLite)
	// as "schema.table". The store also creates Table+"_meta" and
	// Table+"_queues" beside it (PostgreSQL names have at most 63
	// characters, MySQL's 64).
	// Every node of one cluster must use the same table; clusters sharing
	// a database use different ones. Default [DefaultTable].
	Table string

	// MaxOpenConns caps the connection pool that [Open] creates; idle
	// connections are kept up to the same number and closed after a
	// minute unused. Ignored by [OpenDB]: the caller's pool is the
	// caller's. Default [DefaultMaxOpenConns] (4).
	MaxOpenConns int

	// BusyTimeout is how long a SQLite statement waits for another
	// connection or process that holds the write lock before it fails
	// with "database is locked". Writes are a few microseconds each, so
	// waiting is always right. Ignored by other dialects and by [OpenDB].
	// Default 5 s.
	BusyTimeout time.Duration

	// Logger receives the store's few logs (open, schema migration, a
	// SQLite pool without WAL or busy timeout); nil discards them. URLs
	// are logged masked.
	Logger *slog.Logger
}

// setDefaults fills the zero fields the store itself uses; the pool's
// are filled by the pool.
func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable // shared by every node of the cluster
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// conn is the pool's part of c.
func (c Config) conn() sqlconn.Config {
	return sqlconn.Config{URL: c.URL, Dialect: c.Dialect, MaxOpenConns: c.MaxOpenConns, BusyTimeout: c.BusyTimeout}
}

// tableName is an optional qualifier and a table name, lower case.
// The name has room for the suffix "_queues" within PostgreSQL's 63
// characters.
var tableName = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,55}$`)

// Validate reports every problem with the configuration at once. Zero
// fields are valid (they take defaults), except URL, which [Open]
// requires; URLs are named only in masked form.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("sqlstore: config: URL is required, e.g. sqlite:/var/lib/cloudbus/heartbeat.db or postgres://user:password@127.0.0.1:5432/db"))
	}
	errs = append(errs, c.problems()...)
	return errors.Join(errs...)
}

// problems checks what Open and OpenDB share: a URL, if set, must parse.
func (c Config) problems() []error {
	var errs []error
	for _, err := range c.conn().Problems() {
		errs = append(errs, fmt.Errorf("sqlstore: config: %w", err))
	}
	if c.Table != "" && !tableName.MatchString(c.Table) {
		errs = append(errs, fmt.Errorf("sqlstore: config: Table %q is not a valid name: use lower-case letters, digits and underscores, at most 56 characters, optionally as schema.table", c.Table))
	}
	return errs
}

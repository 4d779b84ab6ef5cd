package sqlstore

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"
)

// Dialect is the SQL dialect of a database: it picks the driver and the
// statements. The zero value, DialectAuto, lets [Open] infer it from
// [Config.URL].
type Dialect int

// The dialects.
const (
	// DialectAuto infers the dialect from the URL's form (see
	// [Config.URL]).
	DialectAuto Dialect = iota
	// SQLite is an embedded database in one file (modernc.org/sqlite, pure
	// Go): the processes of one machine share heartbeats through it.
	SQLite
	// Postgres is PostgreSQL (github.com/jackc/pgx/v5 through its
	// database/sql driver), version 10 or later.
	Postgres
	// MySQL is MySQL 5.7 or later, or MariaDB 10.3 or later
	// (github.com/go-sql-driver/mysql).
	MySQL
)

// String returns the dialect's name: "sqlite", "postgres", "mysql",
// "auto", or "Dialect(n)" for an unknown value.
func (d Dialect) String() string {
	switch d {
	case DialectAuto:
		return "auto"
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// DefaultTable is the default name of the heartbeat table.
const DefaultTable = "cloudbus_heartbeat"

// DefaultMaxOpenConns is the default cap on a [Store]'s connection pool.
// A node makes one or two small statements per heartbeat interval, so a
// handful of connections is plenty, and a small cap matters: PostgreSQL
// allows 100 connections in all by default, shared by every node and
// every other client.
const DefaultMaxOpenConns = 4

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
	// [MaskURL]. [OpenDB] does not use URL.
	URL string

	// Dialect forces the dialect instead of inferring it from URL, and is
	// required by [OpenDB]. Default: [DialectAuto].
	Dialect Dialect

	// Table is the heartbeat table's name: lower-case letters, digits and
	// underscores, at most 58 characters, optionally qualified by a
	// schema (PostgreSQL), database (MySQL) or attached database (SQLite)
	// as "schema.table". The store also creates Table+"_meta" beside it.
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

// setDefaults fills the zero fields.
func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable // shared by every node of the cluster
	}
	if c.MaxOpenConns == 0 {
		c.MaxOpenConns = DefaultMaxOpenConns // a few statements per node per second
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = 5 * time.Second // a write takes microseconds; wait, don't fail
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// tableName is an optional qualifier and a table name, lower case.
var tableName = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,57}$`)

// Validate reports every problem with the configuration at once. Zero
// fields are valid (they take defaults), except URL, which [Open]
// requires; URLs are named only in masked form.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("sqlstore: config: URL is required, e.g. sqlite:/var/lib/cloudbus/heartbeat.db or postgres://user:password@127.0.0.1:5432/db"))
	} else if _, err := parseURL(c.URL, c.Dialect); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateCommon()...)
	return errors.Join(errs...)
}

// validateCommon checks what Open and OpenDB share.
func (c Config) validateCommon() []error {
	var errs []error
	switch c.Dialect {
	case DialectAuto, SQLite, Postgres, MySQL:
	default:
		errs = append(errs, fmt.Errorf("sqlstore: config: unknown %s; use SQLite, Postgres, MySQL or leave it zero", c.Dialect))
	}
	if c.Table != "" && !tableName.MatchString(c.Table) {
		errs = append(errs, fmt.Errorf("sqlstore: config: Table %q is not a valid name: use lower-case letters, digits and underscores, at most 58 characters, optionally as schema.table", c.Table))
	}
	if c.MaxOpenConns < 0 {
		errs = append(errs, fmt.Errorf("sqlstore: config: MaxOpenConns %d is negative; leave it 0 for the default (%d)", c.MaxOpenConns, DefaultMaxOpenConns))
	}
	if c.BusyTimeout < 0 {
		errs = append(errs, fmt.Errorf("sqlstore: config: BusyTimeout %s is negative; leave it 0 for the default (5s)", c.BusyTimeout))
	}
	return errs
}

// splitTable splits "schema.table" into its parts; schema is "" if the
// name is not qualified.
func splitTable(name string) (schema, table string) {
	if i := strings.IndexByte(name, '.'); i >= 0 {
		return name[:i], name[i+1:]
	}
	return "", name
}

package sqlstore

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// Dialect is a database's SQL dialect. The zero value, [DialectAuto],
// infers it from [Config.URL].
type Dialect = sqlconn.Dialect

// The dialects.
const (
	// DialectAuto infers the dialect from [Config.URL].
	DialectAuto = sqlconn.Auto
	// SQLite is a database file, through modernc.org/sqlite.
	SQLite = sqlconn.SQLite
	// Postgres is PostgreSQL 10 or later, through pgx.
	Postgres = sqlconn.Postgres
	// MySQL is MySQL 5.7+ or MariaDB 10.3+, through go-sql-driver/mysql.
	MySQL = sqlconn.MySQL
)

// DefaultTable is the default name of the heartbeat table.
const DefaultTable = "cloudbus_heartbeat"

// DefaultMaxOpenConns is the default cap on the pool [Open] creates.
const DefaultMaxOpenConns = sqlconn.DefaultMaxOpenConns

// Config configures [Open] and [OpenDB]. Only URL is required, by Open;
// other zero fields take their defaults.
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
	// A go-sql-driver/mysql DSN without tcp(...) or unix(...), or a
	// PostgreSQL key=value string, needs Dialect. Query parameters go to
	// the driver. [OpenDB] never connects with URL.
	URL string

	// Dialect forces the dialect. Default [DialectAuto].
	Dialect Dialect

	// Table names the heartbeat table: lower-case letters, digits and
	// underscores, at most 56, optionally as "schema.table". One cluster,
	// one table. Default [DefaultTable].
	Table string

	// MaxOpenConns caps the pool [Open] creates; idle connections close
	// after a minute. Default [DefaultMaxOpenConns] (4).
	MaxOpenConns int

	// BusyTimeout is how long a SQLite statement of [Open]'s pool waits
	// for the write lock. Default 5 s.
	BusyTimeout time.Duration

	// Logger receives the store's few logs, URLs masked. Default: none.
	Logger *slog.Logger
}

// setDefaults fills the zero fields the store itself uses.
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

// tableName leaves room for the suffix "_queues" in 63 characters.
var tableName = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,55}$`)

// Validate reports every problem with c for [Open] at once, naming URLs
// masked.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("sqlstore: config: URL is required, e.g. sqlite:/var/lib/cloudbus/heartbeat.db or postgres://user:password@127.0.0.1:5432/db"))
	}
	errs = append(errs, c.problems()...)
	return errors.Join(errs...)
}

// problems checks what Open and OpenDB share.
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

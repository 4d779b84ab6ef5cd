package sqldb

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
)

// DefaultPrefix is the default table prefix: tables refnode_hosts,
// refnode_images, refnode_vms and refnode_meta.
const DefaultPrefix = "refnode"

// DefaultMaxOpenConns is the default cap on a [Store]'s connection pool.
const DefaultMaxOpenConns = 4

// Config configures [Open]. Only URL is required; every other zero field
// takes the default written beside it.
type Config struct {
	// URL names the database; its form tells the dialect:
	//
	//	sqlite:/var/lib/refnode/refnode.db        SQLite, absolute path
	//	sqlite:refnode.db                         SQLite, relative path
	//	file:/var/lib/refnode/refnode.db?...      SQLite URI, as modernc.org/sqlite takes it
	//	postgres://user:password@host:5432/db?sslmode=disable   (or postgresql://)
	//	mysql://user:password@host:3306/db?tls=true
	//	user:password@tcp(host:3306)/db                         go-sql-driver/mysql's DSN
	//
	// Query parameters are passed to the driver. The password never
	// appears in logs or errors.
	URL string

	// Prefix starts the table names: Prefix_hosts, Prefix_images,
	// Prefix_vms and Prefix_meta. Lower-case letters, digits and
	// underscores, starting with a letter or underscore, at most 40
	// characters. Every node of one cluster uses the same prefix;
	// clusters (and tests) sharing a database use different ones.
	// Default [DefaultPrefix].
	Prefix string

	// MaxOpenConns caps the connection pool; idle connections are kept
	// up to the same number and closed after a minute unused. Default
	// [DefaultMaxOpenConns] (4).
	MaxOpenConns int

	// BusyTimeout is how long a SQLite statement waits for another
	// connection or process holding the write lock before it fails with
	// "database is locked". Ignored by other databases. Default 5 s.
	BusyTimeout time.Duration

	// Logger receives the store's few logs (open, tables created); nil
	// discards them. The URL is logged masked.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix // one cluster per database
	}
	if c.MaxOpenConns == 0 {
		c.MaxOpenConns = DefaultMaxOpenConns // a few statements per operation
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = 5 * time.Second // a write takes microseconds: wait, don't fail
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// prefixPattern is a table prefix that leaves room for "_images" within
// every database's identifier limit (PostgreSQL: 63 bytes).
var prefixPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// Validate reports every problem with the configuration at once. Zero
// fields are valid (they take defaults), except URL; the URL is named
// only in masked form.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("sqldb: config: URL is required, e.g. sqlite:refnode.db or postgres://user:password@127.0.0.1:5432/db"))
	} else if p, err := sqlstore.OpenPool(sqlstore.PoolConfig{URL: c.URL}); err != nil {
		errs = append(errs, err) // parsing only: an unused pool holds no connection
	} else {
		_ = p.Close()
	}
	if c.Prefix != "" && !prefixPattern.MatchString(c.Prefix) {
		errs = append(errs, fmt.Errorf("sqldb: config: Prefix %q is not a valid table prefix: use lower-case letters, digits and underscores, at most 40 characters", c.Prefix))
	}
	if c.MaxOpenConns < 0 {
		errs = append(errs, fmt.Errorf("sqldb: config: MaxOpenConns %d is negative; leave it 0 for the default (%d)", c.MaxOpenConns, DefaultMaxOpenConns))
	}
	if c.BusyTimeout < 0 {
		errs = append(errs, fmt.Errorf("sqldb: config: BusyTimeout %s is negative; leave it 0 for the default (5s)", c.BusyTimeout))
	}
	return errors.Join(errs...)
}

// The dialects, as heartbeat/sqlstore names them.
const (
	// SQLite is an embedded database in one file (modernc.org/sqlite).
	SQLite = sqlstore.SQLite
	// Postgres is PostgreSQL (github.com/jackc/pgx/v5's database/sql driver).
	Postgres = sqlstore.Postgres
	// MySQL is MySQL or MariaDB (github.com/go-sql-driver/mysql).
	MySQL = sqlstore.MySQL
)

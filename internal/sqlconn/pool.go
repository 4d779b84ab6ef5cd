package sqlconn

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// DefaultMaxOpenConns is the default cap on a pool: a store makes a few
// small statements per operation, and PostgreSQL allows 100 connections
// in all by default, shared by every node and every other client.
const DefaultMaxOpenConns = 4

// DefaultBusyTimeout is the default SQLite busy timeout: a write takes
// microseconds, so waiting for another writer is always right.
const DefaultBusyTimeout = 5 * time.Second

// Config configures [Open]. Only URL is required; every other zero field
// takes the default written beside it.
type Config struct {
	// URL names the database, in a form [ParseURL] accepts.
	URL string
	// Dialect says which database URL names. Default [Auto]: inferred
	// from URL's form.
	Dialect Dialect
	// MaxOpenConns caps the pool; idle connections are kept up to the
	// same number and closed after a minute unused. Default
	// [DefaultMaxOpenConns].
	MaxOpenConns int
	// BusyTimeout is how long a SQLite statement waits for another
	// connection or process that holds the write lock before it fails
	// with "database is locked". Ignored by other dialects. Default
	// [DefaultBusyTimeout].
	BusyTimeout time.Duration
	// Logger receives, at Warn, what the MySQL driver logs itself (a
	// connection the server closed, say). Nil leaves the driver's own
	// logger, which writes to stderr. Ignored by other dialects.
	Logger *slog.Logger
}

// Problems returns every problem with c, each an error without package
// prefix for the caller to wrap, or nil. An empty URL is not a problem
// here: callers that require one say so in their own words.
func (c Config) Problems() []error {
	var errs []error
	switch c.Dialect {
	case Auto, SQLite, Postgres, MySQL:
		if c.URL != "" {
			if _, err := ParseURL(c.URL, c.Dialect); err != nil {
				errs = append(errs, err)
			}
		}
	default:
		errs = append(errs, fmt.Errorf("unknown %s; use SQLite, Postgres, MySQL or leave it zero", c.Dialect))
	}
	if c.MaxOpenConns < 0 {
		errs = append(errs, fmt.Errorf("MaxOpenConns %d is negative; leave it 0 for the default (%d)", c.MaxOpenConns, DefaultMaxOpenConns))
	}
	if c.BusyTimeout < 0 {
		errs = append(errs, fmt.Errorf("BusyTimeout %s is negative; leave it 0 for the default (%s)", c.BusyTimeout, DefaultBusyTimeout))
	}
	return errs
}

// Pool is a database/sql pool opened from a database URL with the
// settings every cloudbus SQL store uses: SQLite in WAL mode with a busy
// timeout and immediate transactions, PostgreSQL through pgx, MySQL
// through go-sql-driver/mysql, a capped pool, and the URL's passwords
// known so that errors and logs name the database masked. A heartbeat
// store needs a Pool of its own: a beat must not wait for a connection
// behind other stores' work (see heartbeat/sqlstore); refnode opens one
// Pool for its heartbeat store and one for its record store.
//
// A Pool is safe for concurrent use. Whoever opened it closes it, after
// every store using it.
type Pool struct {
	// DB is the pool itself; [Pool.Close] closes it.
	DB *sql.DB
	// URL is the database the pool connects to: its dialect, masked
	// name and secrets.
	URL URL
}

// Open parses cfg.URL and opens its pool without connecting: the first
// statement connects. Its errors name the database masked and carry no
// package prefix.
func Open(cfg Config) (*Pool, error) {
	if cfg.URL == "" {
		return nil, errors.New("URL is required, e.g. sqlite:/var/lib/cloudbus/cloudbus.db or postgres://user:password@127.0.0.1:5432/db")
	}
	if err := errors.Join(cfg.Problems()...); err != nil {
		return nil, err
	}
	if cfg.MaxOpenConns == 0 {
		cfg.MaxOpenConns = DefaultMaxOpenConns // a few statements per operation
	}
	if cfg.BusyTimeout == 0 {
		cfg.BusyTimeout = DefaultBusyTimeout // a write takes microseconds: wait, don't fail
	}
	u, err := ParseURL(cfg.URL, cfg.Dialect)
	if err != nil {
		return nil, err
	}
	var db *sql.DB
	switch u.Dialect {
	case SQLite:
		db, err = sql.Open("sqlite", sqliteDSN(u.dsn, cfg.BusyTimeout))
	case Postgres:
		var pc *pgx.ConnConfig
		if pc, err = pgx.ParseConfig(u.dsn); err == nil {
			db = stdlib.OpenDB(*pc)
		}
	case MySQL:
		var mc *mysql.Config
		if mc, err = mysql.ParseDSN(u.dsn); err == nil {
			if cfg.Logger != nil {
				mc.Logger = driverLog{cfg.Logger}
			}
			var conn driver.Connector
			if conn, err = mysql.NewConnector(mc); err == nil {
				db = sql.OpenDB(conn)
			}
		}
	default:
		err = fmt.Errorf("unknown %s", u.Dialect)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %s", u.Masked, u.Scrub(err.Error()))
	}
	db.SetMaxOpenConns(cfg.MaxOpenConns)
	db.SetMaxIdleConns(cfg.MaxOpenConns)
	db.SetConnMaxIdleTime(time.Minute)
	return &Pool{DB: db, URL: u}, nil
}

// driverLog gives the MySQL driver's own log lines to a slog.Logger.
type driverLog struct{ log *slog.Logger }

// Print logs v, as fmt.Sprint joins it, at Warn.
func (l driverLog) Print(v ...any) {
	l.log.Warn("mysql driver", "said", strings.TrimSpace(fmt.Sprint(v...)))
}

// sqliteDSN adds the stores' pragmas to a file: URI: every connection
// sets busy_timeout, journal_mode=WAL and synchronous=NORMAL, and begins
// transactions with BEGIN IMMEDIATE (a read transaction that later
// writes on a stale snapshot fails without the busy timeout's retry).
func sqliteDSN(uri string, busy time.Duration) string {
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	return uri + sep + url.Values{
		"_pragma": {
			"busy_timeout(" + strconv.FormatInt(busy.Milliseconds(), 10) + ")",
			"journal_mode(WAL)",
			"synchronous(NORMAL)",
		},
		"_txlock": {"immediate"},
	}.Encode()
}

// Close closes the pool. Stores using it must be closed first.
func (p *Pool) Close() error { return p.DB.Close() }

package sqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// PoolConfig configures [OpenPool]. URL is required; the zero value of
// every other field takes the default of the same field of [Config].
type PoolConfig struct {
	// URL names the database, in any form [Config.URL] accepts.
	URL string
	// Dialect says which database URL names; zero infers it from URL.
	Dialect Dialect
	// MaxOpenConns caps the pool (idle connections too, closed after a
	// minute unused). Default DefaultMaxOpenConns.
	MaxOpenConns int
	// BusyTimeout is SQLite's busy timeout. Default 5 s.
	BusyTimeout time.Duration
}

// Pool is a database/sql pool opened from a cloudbus database URL with
// the settings every cloudbus SQL store uses: SQLite in WAL mode with a
// busy timeout and immediate transactions, PostgreSQL through pgx, MySQL
// through go-sql-driver/mysql, a capped pool, and the URL's passwords
// known so that errors and logs can name the database masked. Other
// stores of an application (refnode's records) open their pools with it,
// so that one URL means one thing everywhere.
//
// A Pool is safe for concurrent use. Close it when done.
type Pool struct {
	// DB is the pool; Close closes it.
	DB *sql.DB
	t  target
}

// OpenPool parses cfg.URL and opens its pool without connecting. Its
// errors name the database masked.
func OpenPool(cfg PoolConfig) (*Pool, error) {
	if cfg.MaxOpenConns == 0 {
		cfg.MaxOpenConns = DefaultMaxOpenConns
	}
	if cfg.BusyTimeout == 0 {
		cfg.BusyTimeout = 5 * time.Second
	}
	t, err := parseURL(cfg.URL, cfg.Dialect)
	if err != nil {
		return nil, err
	}
	var db *sql.DB
	switch t.dialect {
	case SQLite:
		db, err = sql.Open("sqlite", sqliteDSN(t.dsn, cfg.BusyTimeout))
	case Postgres:
		var pc *pgx.ConnConfig
		if pc, err = pgx.ParseConfig(t.dsn); err == nil {
			db = stdlib.OpenDB(*pc)
		}
	case MySQL:
		var mc *mysql.Config
		if mc, err = mysql.ParseDSN(t.dsn); err == nil {
			var conn driver.Connector
			if conn, err = mysql.NewConnector(mc); err == nil {
				db = sql.OpenDB(conn)
			}
		}
	default:
		err = fmt.Errorf("unknown %s", t.dialect)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: open %s: %s", t.masked, t.scrub(err.Error()))
	}
	db.SetMaxOpenConns(cfg.MaxOpenConns)
	db.SetMaxIdleConns(cfg.MaxOpenConns)
	db.SetConnMaxIdleTime(time.Minute)
	return &Pool{DB: db, t: t}, nil
}

// sqliteDSN adds the stores' pragmas to a file: URI.
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

// Dialect returns the pool's SQL dialect.
func (p *Pool) Dialect() Dialect { return p.t.dialect }

// MaskedURL returns the URL with its passwords masked.
func (p *Pool) MaskedURL() string { return p.t.masked }

// Scrub returns s with the URL's passwords (plain or URL-escaped) and its
// driver DSN replaced by masked forms: driver errors may quote them.
func (p *Pool) Scrub(s string) string { return p.t.scrub(s) }

// Close closes the pool.
func (p *Pool) Close() error { return p.DB.Close() }

// WithSchemaLock runs fn holding a lock named name across every process
// using the database, so that stores opening the same tables at the same
// time create or migrate them once: an advisory transaction lock
// (PostgreSQL), a write transaction (SQLite, BEGIN IMMEDIATE), or a named
// lock (MySQL, GET_LOCK, 30 s at most; its DDL cannot be
// transactional). fn runs its statements on ex; on PostgreSQL and SQLite
// they commit with the lock's release if fn returns nil.
func (p *Pool) WithSchemaLock(ctx context.Context, name string, fn func(ctx context.Context, ex Execer) error) error {
	return withSchemaLock(ctx, p.DB, p.t.dialect, name, fn)
}

// Execer runs statements under the schema lock: a *sql.Conn or the
// *sql.Tx that holds the lock.
type Execer interface {
	// ExecContext executes a statement.
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	// QueryRowContext runs a query that returns at most one row.
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// lockKey fits a lock name into MySQL's 64 characters (PostgreSQL hashes
// it to an advisory lock key).
func lockKey(name string) string {
	if len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "cloudbus." + hex.EncodeToString(sum[:16])
}

func withSchemaLock(ctx context.Context, db *sql.DB, d Dialect, name string, fn func(ctx context.Context, ex Execer) error) error {
	key := lockKey(name)
	conn, err := db.Conn(ctx)
	// SQLite: a connection switching a brand-new file to WAL takes an
	// exclusive lock, and a second connection opening at that moment
	// gets SQLITE_BUSY without its busy handler being asked; it is over
	// in microseconds, so try again until ctx ends.
	for pause := time.Millisecond; err != nil && d == SQLite && strings.Contains(err.Error(), "SQLITE_BUSY"); pause = min(2*pause, 50*time.Millisecond) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("connect: %w", err)
		case <-time.After(pause):
		}
		conn, err = db.Conn(ctx)
	}
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()

	var ex Execer = conn
	var unlock func(ok bool) error
	switch d {
	case Postgres:
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		ex = tx
		unlock = func(ok bool) error {
			if ok {
				return tx.Commit()
			}
			return tx.Rollback()
		}
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, key); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("take the schema lock: %w", err)
		}
	case SQLite:
		if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
			return fmt.Errorf("begin immediate: %w", err)
		}
		unlock = func(ok bool) error {
			stmt := `COMMIT`
			if !ok {
				stmt = `ROLLBACK`
			}
			_, err := conn.ExecContext(context.WithoutCancel(ctx), stmt)
			return err
		}
	case MySQL:
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 30)`, key).Scan(&got); err != nil {
			return fmt.Errorf("take the schema lock: %w", err)
		}
		if got.Int64 != 1 {
			return fmt.Errorf("take the schema lock %s: not granted in 30 s: another node holds it", key)
		}
		unlock = func(bool) error {
			_, err := conn.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(?)`, key)
			return err
		}
	default:
		return fmt.Errorf("unknown %s", d)
	}

	err = fn(ctx, ex)
	if uerr := unlock(err == nil); uerr != nil {
		// The connection may still hold the lock or a transaction: make
		// database/sql discard it instead of reusing it.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		if err == nil {
			err = fmt.Errorf("release the schema lock: %w", uerr)
		}
	}
	return err
}

package nodekit

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// The connection pools of a node: the heartbeat store has its own, so
// that beats never wait for a connection behind the services' work. One
// pool shared by both let a database link slowed to 100-150 ms per round
// trip, under about 60 calls a second, fill all 8 connections with record
// transactions within 1.2 s; the beats then timed out waiting for a
// connection, and the node's lease expired and it was evicted 4.2-4.6 s
// after the slowdown, though each beat took only 200-300 ms once it had a
// connection. The fence's checks stay on the services' pool: they run
// inside the services' transactions and decide whether a write commits,
// not whether the node is live (package fence, "Writes, not liveness").
//
// SQLite gets the two pools too, though its file has one writer: a beat
// still waits for the write lock of any writing transaction, and its own
// pool spares it only the wait for a connection. Measured with two
// processes on one file (refnode's BenchmarkSQLiteBeatsUnderRecordLoad):
// with every record connection held 200 ms at a time, beats took 106 ms
// (p50) and up to 205 ms on a shared pool, 0.4 ms and up to 3 ms on their
// own; at 60 calls a second, or 64 transactions at once 5 times a second,
// both alike; with the writer saturated (16 writers in a loop,
// 8,000-11,000 writes a second) 7-11 % of beats missed their 500 ms on
// their own pool, 1 % on a shared one, whose waiting writers the pool
// hands the lock's next turn while SQLite's busy handler lets the beat
// sleep. That load calls for PostgreSQL or MySQL anyway.
const (
	// ServiceConns caps the services' pool (Env.DB): a fenced
	// transaction holds a connection for 5 to 9 round trips (the fence's
	// check, the message's record, the reads and writes, the commit).
	ServiceConns = 2 * sqlconn.DefaultMaxOpenConns
	// HeartbeatConns caps the heartbeat store's pool. Its users each make
	// one statement at a time: the heartbeat monitor (a beat, the list of
	// members and any evictions each interval, the store's clock every
	// 4th), the node's queue sweep (every EvictAfter), and the check of a
	// lifecycle event against the store (one event at a time). Four
	// leave the monitor a free connection while all the others run at
	// once; connections unused for a minute are closed, so a quiet node
	// keeps one or two open.
	HeartbeatConns = sqlconn.DefaultMaxOpenConns
)

// ErrNoIdleTimeout is matched by the error of [OpenDatabase] on a MySQL
// server (not MariaDB), which has no idle-transaction timeout: see
// DatabaseConfig.AllowNoIdleTimeout.
var ErrNoIdleTimeout = errors.New("nodekit: the database cannot end a transaction left idle")

// DatabaseConfig configures [OpenDatabase].
type DatabaseConfig struct {
	// URL names the database: sqlite:PATH, postgres://… or mysql://…
	// (or go-sql-driver/mysql's DSN). Required.
	URL string
	// HeartbeatTable names the heartbeat table. Required.
	HeartbeatTable string
	// EvictAfter is the heartbeat's eviction threshold: the longest a
	// transaction may stay open between two statements. Default
	// heartbeat's 3 s.
	EvictAfter time.Duration
	// AllowNoIdleTimeout lets a node run on a MySQL server, which cannot
	// end a transaction left idle: a node paused or cut off inside a
	// fenced transaction then holds its resources' token rows until the
	// server notices the dead connection (hours with default TCP
	// settings), and their new owners wait innodb_lock_wait_timeout (50 s
	// by default) for each, then fail. Leave it false unless you accept
	// that; MariaDB 10.3+ and PostgreSQL have the setting.
	AllowNoIdleTimeout bool
	// Logger receives the stores' logs and the MySQL driver's. Default:
	// discarded.
	Logger *slog.Logger
}

// Database is a node's database: the heartbeat store on a pool of its
// own, and the pool for the services' transactions, both with the
// session settings fencing needs.
type Database struct {
	// Heartbeat is the heartbeat store.
	Heartbeat *sqlstore.Store
	// Dialect is the database's dialect.
	Dialect sqlstore.Dialect
	// Masked is the URL with its passwords masked, for logs.
	Masked string
	// IdleTimeout is the session setting the pools set: e.g.
	// "idle_in_transaction_session_timeout=3000", or "" where none is
	// needed (SQLite) or possible (MySQL, allowed).
	IdleTimeout string
	// Shown is the idle-transaction bound as the services' pool's
	// session reports it (PostgreSQL: SHOW
	// idle_in_transaction_session_timeout, e.g. "3s"; MariaDB: SHOW
	// SESSION VARIABLES LIKE 'idle_transaction_timeout', e.g. "3"), read
	// once at open; "" on SQLite and MySQL.
	Shown string

	hbPool, svcPool *sqlconn.Pool
}

// OpenDatabase opens the heartbeat store (table cfg.HeartbeatTable) and
// the services' pool in the database cfg.URL names, each on its own
// pool ([HeartbeatConns] and [ServiceConns] connections), both bounding
// how long a transaction may stay idle to cfg.EvictAfter, unless the URL
// sets it itself: PostgreSQL's idle_in_transaction_session_timeout
// (milliseconds, at least 1 s) or MariaDB's idle_transaction_timeout
// (whole seconds, rounded up). A process paused inside a fenced
// transaction, or cut from the database, holds its resources' token
// rows until the database ends that transaction (package fence); SQLite
// needs no setting (a dead process's lock dies with it). On a MySQL
// server it fails with [ErrNoIdleTimeout] unless cfg.AllowNoIdleTimeout.
// On failure it closes what it opened.
func OpenDatabase(ctx context.Context, cfg DatabaseConfig) (_ *Database, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.EvictAfter <= 0 {
		cfg.EvictAfter = 3 * time.Second
	}
	u, err := sqlconn.ParseURL(cfg.URL, sqlconn.Auto)
	if err != nil {
		return nil, fmt.Errorf("nodekit: database: %w", err)
	}
	d := &Database{Dialect: u.Dialect, Masked: u.Masked}
	defer func() {
		if err != nil {
			_ = d.Close()
		}
	}()
	withIdle := cfg.URL
	switch u.Dialect {
	case sqlconn.Postgres:
		withIdle, d.IdleTimeout = postgresIdleTimeout(cfg.URL, cfg.EvictAfter)
	case sqlconn.MySQL:
		version, err := serverVersion(ctx, cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("nodekit: database %s: ask the server its version: %w", u.Masked, err)
		}
		if !strings.Contains(strings.ToLower(version), "mariadb") {
			if !cfg.AllowNoIdleTimeout {
				return nil, fmt.Errorf("%w: %s is MySQL %s, which has no idle-transaction timeout: a node paused or cut off inside a fenced transaction would hold its resources' rows until the server drops the connection (hours), and their new owners would fail after innodb_lock_wait_timeout each; "+
					"use MariaDB 10.3+ or PostgreSQL, or accept the risk with AllowNoIdleTimeout (-db-allow-no-idle-timeout)", ErrNoIdleTimeout, u.Masked, version)
			}
			cfg.Logger.Warn("nodekit: MySQL cannot end an idle transaction; running without (AllowNoIdleTimeout)", "db", u.Masked, "version", version)
			break
		}
		withIdle, d.IdleTimeout = mariaDBIdleTimeout(cfg.URL, cfg.EvictAfter)
	}
	if d.hbPool, err = sqlconn.Open(sqlconn.Config{URL: withIdle, MaxOpenConns: HeartbeatConns, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("nodekit: open the database: %w", err)
	}
	if d.svcPool, err = sqlconn.Open(sqlconn.Config{URL: withIdle, MaxOpenConns: ServiceConns, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("nodekit: open the database: %w", err)
	}
	if d.Shown, err = showIdleTimeout(ctx, d.svcPool.DB, d.Dialect, d.IdleTimeout != ""); err != nil {
		return nil, fmt.Errorf("nodekit: database %s: %w", u.Masked, err)
	}
	if d.Heartbeat, err = sqlstore.OpenDB(ctx, d.hbPool.DB, sqlstore.Config{URL: cfg.URL, Table: cfg.HeartbeatTable, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("nodekit: open the heartbeat store: %w", err)
	}
	return d, nil
}

// showIdleTimeout reads the idle-transaction bound of a session of db,
// if set is true.
func showIdleTimeout(ctx context.Context, db *sql.DB, d sqlstore.Dialect, set bool) (string, error) {
	if !set {
		return "", nil
	}
	var name, shown string
	var err error
	switch d {
	case sqlconn.Postgres:
		err = db.QueryRowContext(ctx, "SHOW idle_in_transaction_session_timeout").Scan(&shown)
	case sqlconn.MySQL:
		err = db.QueryRowContext(ctx, "SHOW SESSION VARIABLES LIKE 'idle_transaction_timeout'").Scan(&name, &shown)
	}
	if err != nil {
		return "", fmt.Errorf("read the idle-transaction bound of a session: %w", err)
	}
	return shown, nil
}

// DB returns the services' pool (Env.DB).
func (d *Database) DB() *sql.DB { return d.svcPool.DB }

// HeartbeatDB returns the heartbeat store's pool, for its statistics.
func (d *Database) HeartbeatDB() *sql.DB { return d.hbPool.DB }

// Close closes the heartbeat store and both pools. It is idempotent.
func (d *Database) Close() error {
	var errs []error
	if d.Heartbeat != nil {
		errs = append(errs, d.Heartbeat.Close())
		d.Heartbeat = nil
	}
	for _, p := range []**sqlconn.Pool{&d.svcPool, &d.hbPool} {
		if *p != nil {
			errs = append(errs, (*p).Close())
			*p = nil
		}
	}
	return errors.Join(errs...)
}

// postgresIdleTimeout adds idle_in_transaction_session_timeout = d (in
// milliseconds, at least 1 s) to a postgres:// URL that does not set
// it, and returns the URL and the setting in force.
func postgresIdleTimeout(raw string, d time.Duration) (string, string) {
	const key = "idle_in_transaction_session_timeout"
	pu, err := url.Parse(raw)
	if err != nil || (pu.Scheme != "postgres" && pu.Scheme != "postgresql") {
		return raw, ""
	}
	q := pu.Query()
	if v := q.Get(key); v != "" {
		return raw, key + "=" + v
	}
	v := strconv.FormatInt(max(d.Milliseconds(), 1000), 10)
	q.Set(key, v)
	pu.RawQuery = q.Encode()
	return pu.String(), key + "=" + v
}

// mariaDBIdleTimeout adds idle_transaction_timeout = d (whole seconds,
// rounded up) to a MariaDB URL or DSN that does not set it: the driver
// sets a parameter it does not know as a session variable on every
// connection (on MySQL this one would fail the connection, hence the
// check of the server first).
func mariaDBIdleTimeout(raw string, d time.Duration) (string, string) {
	const key = "idle_transaction_timeout"
	seconds := strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10)
	if strings.HasPrefix(raw, "mysql://") {
		pu, err := url.Parse(raw)
		if err != nil {
			return raw, ""
		}
		q := pu.Query()
		if v := q.Get(key); v != "" {
			return raw, key + "=" + v
		}
		q.Set(key, seconds)
		pu.RawQuery = q.Encode()
		return pu.String(), key + "=" + seconds
	}
	cfg, err := mysql.ParseDSN(raw)
	if err != nil {
		return raw, ""
	}
	if v := cfg.Params[key]; v != "" {
		return raw, key + "=" + v
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params[key] = seconds
	return cfg.FormatDSN(), key + "=" + seconds
}

// serverVersion asks a MySQL-dialect server its VERSION(), within 10 s.
// Tests replace it to play a server this machine does not run.
var serverVersion = func(ctx context.Context, raw string) (string, error) {
	p, err := sqlconn.Open(sqlconn.Config{URL: raw, MaxOpenConns: 1})
	if err != nil {
		return "", err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var version string
	if err := p.DB.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return "", errors.New(p.URL.Scrub(err.Error()))
	}
	return version, nil
}

// TableBase turns a queue prefix into the start of table names: lower
// case, characters other than letters and digits replaced by '_', and a
// long prefix shortened with a hash, so that "cloudbus" gives the tables
// cloudbus_heartbeat and cloudbus_<program>_*, and clusters with
// different prefixes never share tables.
func TableBase(prefix string) string {
	b := []byte(strings.ToLower(prefix))
	for i, c := range b {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			b[i] = '_'
		}
	}
	s := string(b)
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		s = "_" + s
	}
	if len(s) > 24 {
		sum := sha256.Sum256([]byte(prefix))
		s = s[:15] + "_" + hex.EncodeToString(sum[:4])
	}
	return s
}

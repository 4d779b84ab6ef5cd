package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// maxNodeLen bounds a node name (MySQL's key column is VARCHAR(255)).
const maxNodeLen = 255

// Store is a [heartbeat.Store] in SQL tables. It is safe for
// concurrent use by any number of goroutines, and any number of Stores,
// in any number of processes, may share one table: every write is one
// conditional statement (or, for a long list of queues, one
// transaction). Every method honours ctx and returns the driver's error
// wrapped with what failed and the masked URL.
//
// A Store made by [Open] owns its connection pool and [Store.Close]
// closes it; one made by [OpenDB] does not close the caller's pool.
type Store struct {
	db      *sql.DB
	ownDB   bool
	dialect Dialect
	table   string
	url     sqlconn.URL // names the database in errors and logs, masked
	st      statements

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ heartbeat.Store = (*Store)(nil)

// Open connects to the database cfg.URL names, creates the heartbeat
// tables if they are missing (or migrates them to this version's schema)
// and returns the store, on a connection pool of its own
// ([Config.MaxOpenConns], default 4). It fails if the database cannot be
// reached within ctx. Close the store when done.
//
// The pool is the store's alone, as it should be: beats never wait for a
// connection behind other work (see "A pool of its own" in the package
// documentation: on a pool shared with a node's record transactions, a
// database slowed to 100-150 ms per round trip had the node evicted).
//
// SQLite: the file is created if missing; every connection sets
// journal_mode=WAL, synchronous=NORMAL and busy_timeout=BusyTimeout, and
// begins transactions with BEGIN IMMEDIATE (_txlock=immediate).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	p, err := sqlconn.Open(cfg.conn())
	if err != nil {
		return nil, fmt.Errorf("sqlstore: %w", err)
	}
	s, err := newStore(ctx, p.DB, true, p.URL, cfg)
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	return s, nil
}

// OpenDB returns a store on a pool the caller opened, after creating or
// migrating the tables as [Open] does. Give it a pool that nothing else
// uses (4 connections are plenty): a beat that waits for a connection
// behind other statements misses its timeout like a beat the database
// never answered, and its node is evicted. On a pool shared with a
// node's record transactions, a database link slowed to 100-150 ms per
// round trip did that within 4.2-4.6 s, though each beat took 200-300 ms
// once it had a connection (see "A pool of its own" in the package
// documentation).
//
// cfg.Dialect or cfg.URL must say which database db reaches. OpenDB
// never connects with cfg.URL: if set, it gives the dialect and names the
// database, masked, in errors and logs, and its passwords are scrubbed
// from driver errors; without it they name the dialect only. MaxOpenConns and BusyTimeout
// are not used. [Store.Close] leaves db open: the caller closes it after
// the store.
//
// For SQLite, db's connections should set a busy timeout and WAL mode
// (with modernc.org/sqlite:
// file:path?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)),
// or concurrent writers fail with "database is locked"; OpenDB logs a
// warning if the first connection lacks them.
func OpenDB(ctx context.Context, db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlstore: OpenDB: db is nil; pass an open *sql.DB")
	}
	errs := cfg.problems()
	if cfg.Dialect == DialectAuto && cfg.URL == "" {
		errs = append(errs, errors.New("sqlstore: OpenDB: Config.Dialect is required (or a Config.URL naming db's database): SQLite, Postgres or MySQL"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	u := sqlconn.URL{Dialect: cfg.Dialect, Masked: cfg.Dialect.String() + " (caller's *sql.DB)"}
	if cfg.URL != "" {
		var err error
		if u, err = sqlconn.ParseURL(cfg.URL, cfg.Dialect); err != nil { // checked by problems
			return nil, fmt.Errorf("sqlstore: config: %w", err)
		}
	}
	if u.Dialect == SQLite {
		warnSQLitePragmas(ctx, db, cfg.Logger)
	}
	return newStore(ctx, db, false, u, cfg)
}

// warnSQLitePragmas logs a warning if db's connections lack WAL or a
// busy timeout.
func warnSQLitePragmas(ctx context.Context, db *sql.DB, log *slog.Logger) {
	var mode string
	var busy int64
	if db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode) != nil ||
		db.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy) != nil {
		return // the migration will report what is wrong
	}
	if mode != "wal" || busy == 0 {
		log.Warn("sqlstore: SQLite pool without WAL or busy timeout: concurrent writers may fail with \"database is locked\"; open it with _pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)",
			"journal_mode", mode, "busy_timeout_ms", busy)
	}
}

// newStore migrates the tables and returns the store.
func newStore(ctx context.Context, db *sql.DB, own bool, u sqlconn.URL, cfg Config) (*Store, error) {
	s := &Store{db: db, ownDB: own, dialect: u.Dialect, table: cfg.Table, url: u, st: newStatements(u.Dialect, cfg.Table)}
	found, err := migrate(ctx, db, u.Dialect, s.st, cfg.Table)
	if err != nil {
		return nil, s.fail(ctx, "open table "+cfg.Table, err)
	}
	log := cfg.Logger.With("dialect", u.Dialect.String(), "url", u.Masked, "table", cfg.Table)
	if found < schemaVersion {
		log.Info("sqlstore: schema migrated", "from", found, "to", schemaVersion)
	}
	log.Info("sqlstore: opened", "schema_version", schemaVersion)
	return s, nil
}

// Dialect returns the store's SQL dialect.
func (s *Store) Dialect() Dialect { return s.dialect }

// Table returns the heartbeat table's name.
func (s *Store) Table() string { return s.table }

// MaskedURL returns the database URL with its password masked, as the
// store's errors and logs name it. For a store made by [OpenDB] without
// [Config.URL] it names the dialect only.
func (s *Store) MaskedURL() string { return s.url.Masked }

// Close closes the connection pool if [Open] made it, and makes every
// later call fail with [heartbeat.ErrClosed]. Calls in flight finish
// first. Close is idempotent: later calls return the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.ownDB {
			if err := s.db.Close(); err != nil {
				s.closeErr = s.fail(context.Background(), "close", err)
			}
		}
	})
	return s.closeErr
}

// begin checks, before op starts, that the store is open and ctx is not
// done, so a done ctx changes nothing.
func (s *Store) begin(ctx context.Context, op string) error {
	if s.closed.Load() {
		return fmt.Errorf("sqlstore: %s: %w", op, heartbeat.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqlstore: %s: %w", op, err)
	}
	return nil
}

// Register implements [heartbeat.Store.Register]: the epoch is
// max(last epoch issued by this table + 1, the database's clock in
// microseconds), so it differs from every earlier epoch of every node.
// An error may leave the registration done or not; retrying is safe (it
// registers yet another epoch).
func (s *Store) Register(ctx context.Context, node string) (int64, error) {
	op := "register node " + node
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	if node == "" || len(node) > maxNodeLen {
		return 0, fmt.Errorf("sqlstore: register: node %q must be 1 to %d bytes; pass the node's UUID", node, maxNodeLen)
	}
	var epoch int64
	switch s.dialect {
	case Postgres:
		if err := s.db.QueryRowContext(ctx, s.st.register, node).Scan(&epoch); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				err = errNoMeta
			}
			return 0, s.fail(ctx, op, err)
		}
		return epoch, nil
	case SQLite:
		if err := s.db.QueryRowContext(ctx, s.st.reserve).Scan(&epoch); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				err = errNoMeta
			}
			return 0, s.fail(ctx, op+": reserve an epoch", err)
		}
		if _, err := s.db.ExecContext(ctx, s.st.register, node, epoch); err != nil {
			return 0, s.fail(ctx, op, err)
		}
		return epoch, nil
	default: // MySQL
		res, err := s.db.ExecContext(ctx, s.st.reserve)
		if err == nil {
			epoch, err = reserved(res)
		}
		if err != nil {
			return 0, s.fail(ctx, op+": reserve an epoch", err)
		}
		if _, err := s.db.ExecContext(ctx, s.st.register, node, epoch, epoch); err != nil {
			return 0, s.fail(ctx, op, err)
		}
		return epoch, nil
	}
}

// reserved reads the epoch MySQL's reserve statement handed back
// through LAST_INSERT_ID.
func reserved(res sql.Result) (int64, error) {
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	if n != 1 {
		return 0, errNoMeta
	}
	return res.LastInsertId()
}

// Beat implements [heartbeat.Store.Beat] with one UPDATE whose WHERE
// names the node and epoch; no row updated means [heartbeat.ErrEvicted].
// It leaves the bus status ([Store.BeatBus]) as it was. Another error
// leaves the beat done or not; retrying is safe.
func (s *Store) Beat(ctx context.Context, node string, epoch int64) error {
	return s.beat(ctx, fmt.Sprintf("beat node %s epoch %d", node, epoch), s.st.beat, node, epoch)
}

// BeatBus implements [heartbeat.Store.BeatBus]: it is [Store.Beat], in one
// UPDATE with the same WHERE and the same errors, that also sets the
// column bus_down_us, the database's clock when the node first reported
// the bus down: 0 if busUp, else the beat's own stamp if it was 0, else
// unchanged. [Store.List] reports the time since as
// [heartbeat.Record.BusDown]. Retrying after an error is safe: a retried
// down beat keeps the first stamp.
func (s *Store) BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error {
	stmt, state := s.st.beatBusDown, "down"
	if busUp {
		stmt, state = s.st.beatBusUp, "up"
	}
	return s.beat(ctx, fmt.Sprintf("beat node %s epoch %d (bus %s)", node, epoch, state), stmt, node, epoch)
}

// beat runs stmt, one of the beat statements, on (node, epoch).
func (s *Store) beat(ctx context.Context, op, stmt, node string, epoch int64) error {
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, stmt, node, epoch)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return s.fail(ctx, op, err)
	}
	if n == 0 {
		return fmt.Errorf("sqlstore: %s: no record with this epoch in %s: %w", op, s.table, heartbeat.ErrEvicted)
	}
	return nil
}

// StoreTime implements [heartbeat.Store.StoreTime]: the database's clock,
// the one beats are stamped with, read in one SELECT. Its resolution is a
// microsecond on PostgreSQL and MySQL, a millisecond on SQLite.
func (s *Store) StoreTime(ctx context.Context) (time.Time, time.Duration, error) {
	const op = "read the clock"
	if err := s.begin(ctx, op); err != nil {
		return time.Time{}, 0, err
	}
	var us int64
	if err := s.db.QueryRowContext(ctx, s.st.now).Scan(&us); err != nil {
		return time.Time{}, 0, s.fail(ctx, op, err)
	}
	return time.UnixMicro(us), clockResolution[s.dialect], nil
}

// List implements [heartbeat.Store.List] with one SELECT that computes
// every age, and every [heartbeat.Record.BusDown], on the database's
// clock, in microseconds: an age that would be negative (the database's
// clock went back) is 0, and a BusDown is at least a microsecond while
// the node reports the bus down, 0 otherwise. The records are sorted by
// node.
func (s *Store) List(ctx context.Context) ([]heartbeat.Record, error) {
	const op = "list"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.st.list)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	defer rows.Close()
	var out []heartbeat.Record
	for rows.Next() {
		var r heartbeat.Record
		var ageUS, busDownUS int64
		if err := rows.Scan(&r.Node, &r.Epoch, &r.Seq, &ageUS, &busDownUS); err != nil {
			return nil, s.fail(ctx, op, err)
		}
		r.Age = micros(ageUS)
		r.BusDown = micros(busDownUS)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, op, err)
	}
	return out, nil
}

// Evict implements [heartbeat.Store.Evict] with one DELETE whose WHERE
// names the node, epoch and sequence; it reports whether that statement
// deleted the row, so of concurrent evictors exactly one sees true. An
// error leaves the eviction done or not: a retry after a lost reply
// reports false although the record was deleted by the first try.
func (s *Store) Evict(ctx context.Context, node string, epoch, seq int64) (bool, error) {
	op := fmt.Sprintf("evict node %s epoch %d seq %d", node, epoch, seq)
	if err := s.begin(ctx, op); err != nil {
		return false, err
	}
	res, err := s.db.ExecContext(ctx, s.st.evict, node, epoch, seq)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return false, s.fail(ctx, op, err)
	}
	return n == 1, nil
}

// Deregister implements [heartbeat.Store.Deregister] with one DELETE
// whose WHERE names the node and epoch. It is idempotent, so retrying
// after an error is safe.
func (s *Store) Deregister(ctx context.Context, node string, epoch int64) error {
	op := fmt.Sprintf("deregister node %s epoch %d", node, epoch)
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, s.st.dereg, node, epoch); err != nil {
		return s.fail(ctx, op, err)
	}
	return nil
}

// Drop deletes the store's tables (the records, the queues and the
// schema metadata), for tests that clean up after themselves and for
// uninstalling. Every node using the table loses its membership record
// and its queues: use it only when no node runs.
func (s *Store) Drop(ctx context.Context) error {
	for _, stmt := range s.st.drop {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return s.fail(ctx, "drop table "+s.table, err)
		}
	}
	return nil
}

// fail wraps a driver error: "sqlstore: OP on URL: ERR", with the URL
// masked and passwords scrubbed from the driver's text. The chain keeps
// the driver's error and, if ctx ended, ctx's error, for errors.Is.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	return fmt.Errorf("sqlstore: %w", s.url.Fail(ctx, op, err))
}

// micros converts a non-negative count of microseconds to a Duration,
// saturating at the largest Duration (292 years) instead of wrapping to
// a negative one.
func micros(us int64) time.Duration {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(max(us, 0)) * time.Microsecond
}

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

// maxNodeLen is the longest node name, in bytes.
const maxNodeLen = 255

// Store is a [heartbeat.Store] in SQL tables. It is safe for concurrent
// use, and any number of Stores, in any processes, may share a table.
type Store struct {
	db      *sql.DB
	ownDB   bool
	dialect Dialect
	table   string
	url     sqlconn.URL // names the database in errors and logs, masked
	st      statements

	// The SQLite database file, for the session lock files (lockPath).
	dbFileMu sync.Mutex
	dbFile   string

	holdsMu sync.Mutex
	holds   map[heartbeat.SessionHold]struct{} // held session locks, released by Close

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ heartbeat.Store = (*Store)(nil)

// Open connects to cfg.URL on a pool of its own, creates or migrates the
// tables, and returns the store; it fails if the database cannot be
// reached within ctx. A SQLite file is created if missing. Close the
// store when done.
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

// OpenDB returns a store on db, a pool of its own that the caller opened
// and closes after the store, creating or migrating the tables as [Open]
// does. cfg.Dialect or cfg.URL must say which database db reaches; the
// URL's passwords are scrubbed from errors. MaxOpenConns and BusyTimeout
// are not used. On SQLite, OpenDB logs a warning if db lacks WAL or a
// busy timeout.
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

// MaskedURL returns the database URL with its password masked, or, for
// [OpenDB] without a URL, the dialect.
func (s *Store) MaskedURL() string { return s.url.Masked }

// Close releases the session locks held through the store (see
// [Store.HoldSession]) and closes the pool if [Open] made it; later calls
// fail with [heartbeat.ErrClosed]. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.holdsMu.Lock()
		holds := s.holds
		s.holds = nil
		s.holdsMu.Unlock()
		for h := range holds {
			_ = h.Release()
		}
		if s.ownDB {
			if err := s.db.Close(); err != nil {
				s.closeErr = s.fail(context.Background(), "close", err)
			}
		}
	})
	return s.closeErr
}

// begin checks that the store is open and ctx is not done.
func (s *Store) begin(ctx context.Context, op string) error {
	if s.closed.Load() {
		return fmt.Errorf("sqlstore: %s: %w", op, heartbeat.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqlstore: %s: %w", op, err)
	}
	return nil
}

// Register implements [heartbeat.Store.Register]. The epoch is max(the
// table's last epoch + 1, the database's clock in microseconds).
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

// reserved reads the epoch MySQL's reserve statement returned.
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

// Beat implements [heartbeat.Store.Beat].
func (s *Store) Beat(ctx context.Context, node string, epoch int64) error {
	return s.beat(ctx, fmt.Sprintf("beat node %s epoch %d", node, epoch), s.st.beat, node, epoch)
}

// BeatBus implements [heartbeat.Store.BeatBus].
func (s *Store) BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error {
	stmt, state := s.st.beatBusDown, "down"
	if busUp {
		stmt, state = s.st.beatBusUp, "up"
	}
	return s.beat(ctx, fmt.Sprintf("beat node %s epoch %d (bus %s)", node, epoch, state), stmt, node, epoch)
}

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

// StoreTime implements [heartbeat.Store.StoreTime]: the database's clock.
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

// List implements [heartbeat.Store.List], sorted by node.
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

// Evict implements [heartbeat.Store.Evict].
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

// Deregister implements [heartbeat.Store.Deregister].
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

// Drop deletes the store's tables, for tests and uninstalling; no node
// may be using them.
func (s *Store) Drop(ctx context.Context) error {
	for _, stmt := range s.st.drop {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return s.fail(ctx, "drop table "+s.table, err)
		}
	}
	return nil
}

// fail wraps a driver error with op, the masked URL and ctx's error.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	return fmt.Errorf("sqlstore: %w", s.url.Fail(ctx, op, err))
}

// micros converts microseconds to a Duration, clamped to [0, max].
func micros(us int64) time.Duration {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(max(us, 0)) * time.Microsecond
}

package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
)

var _ heartbeat.SessionLocker = (*Store)(nil)

// lockKey names node's session lock in the store's table: 64 bits of
// FNV-1a over the table and the node, so that clusters sharing a
// database (another table) never share a lock.
func (s *Store) lockKey(node string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s.table))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(node))
	return h.Sum64()
}

// lockName is lockKey as a MySQL lock name (at most 64 characters).
func (s *Store) lockName(node string) string {
	return fmt.Sprintf("cloudbus.%016x", s.lockKey(node))
}

// HoldSession implements [heartbeat.SessionLocker]: on PostgreSQL a
// session-level advisory lock (pg_try_advisory_lock) and on MySQL or
// MariaDB a named lock (GET_LOCK), each on a connection taken from the
// store's pool for as long as the hold lives (it counts against
// MaxOpenConns); on SQLite an exclusive flock(2) of a file beside the
// database file (unix only; not for an in-memory database). The database
// releases the lock as soon as the session ends: the process exits or
// is killed, or the connection drops. PostgreSQL and MySQL session locks
// need a session of the database's own: not one through a pooler that
// hands the client's statements to other sessions (PgBouncer in
// transaction mode).
func (s *Store) HoldSession(ctx context.Context, node string) (heartbeat.SessionHold, error) {
	op := "hold the session lock of node " + node
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	if s.dialect == SQLite {
		return s.holdFile(ctx, op, node)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	ok, err := s.tryLock(ctx, conn, node)
	if err != nil {
		discard(conn) // never reuse a session in doubt
		return nil, s.fail(ctx, op, err)
	}
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("sqlstore: %s: %w", op, heartbeat.ErrSessionHeld)
	}
	h := &sqlHold{s: s, node: node, conn: conn}
	q := `SELECT CONNECTION_ID()`
	if s.dialect == Postgres {
		q = `SELECT pg_backend_pid()`
	}
	if err := conn.QueryRowContext(ctx, q).Scan(&h.session); err != nil {
		discard(conn)
		return nil, s.fail(ctx, op, err)
	}
	return s.track(op, h)
}

// SessionFree implements [heartbeat.SessionLocker]: it tries node's lock
// on a pooled connection and, if it got it, releases it at once.
func (s *Store) SessionFree(ctx context.Context, node string) (bool, error) {
	op := "test the session lock of node " + node
	if err := s.begin(ctx, op); err != nil {
		return false, err
	}
	if s.dialect == SQLite {
		return s.fileFree(ctx, op, node)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return false, s.fail(ctx, op, err)
	}
	defer conn.Close()
	ok, err := s.tryLock(ctx, conn, node)
	if err != nil {
		return false, s.fail(ctx, op, err)
	}
	if !ok {
		return false, nil
	}
	if err := s.unlock(ctx, conn, node); err != nil {
		// The lock may stay with this pooled session: discard it, so the
		// database ends the session and releases the lock.
		discard(conn)
		return true, s.fail(ctx, op+": release it", err)
	}
	return true, nil
}

// tryLock takes node's lock on conn without waiting.
func (s *Store) tryLock(ctx context.Context, conn *sql.Conn, node string) (bool, error) {
	switch s.dialect {
	case Postgres:
		var ok bool
		err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, int64(s.lockKey(node))).Scan(&ok)
		return ok, err
	default: // MySQL: 1 taken, 0 held by another session, NULL an error
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 0)`, s.lockName(node)).Scan(&got); err != nil {
			return false, err
		}
		if !got.Valid {
			return false, errors.New("GET_LOCK returned NULL")
		}
		return got.Int64 == 1, nil
	}
}

// unlock releases node's lock taken on conn.
func (s *Store) unlock(ctx context.Context, conn *sql.Conn, node string) error {
	var ok sql.NullBool
	var err error
	switch s.dialect {
	case Postgres:
		err = conn.QueryRowContext(ctx, `SELECT pg_advisory_unlock($1)`, int64(s.lockKey(node))).Scan(&ok)
	default:
		var n sql.NullInt64
		err = conn.QueryRowContext(ctx, `SELECT RELEASE_LOCK(?)`, s.lockName(node)).Scan(&n)
		ok = sql.NullBool{Bool: n.Int64 == 1, Valid: n.Valid}
	}
	if err != nil {
		return err
	}
	if !ok.Bool {
		return errors.New("the session did not hold the lock")
	}
	return nil
}

// sqlHold is a lock held on a connection of the pool.
type sqlHold struct {
	s       *Store
	node    string
	session int64 // the server's id of the session: a PostgreSQL backend pid, a MySQL connection id

	mu   sync.Mutex
	conn *sql.Conn // nil once released
}

// Check implements [heartbeat.SessionHold]: it asks the session whether
// it still holds the lock.
func (h *sqlHold) Check(ctx context.Context) error {
	op := "check the session lock of node " + h.node
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return fmt.Errorf("sqlstore: %s: released: %w", op, heartbeat.ErrSessionLost)
	}
	var held bool
	var err error
	switch h.s.dialect {
	case Postgres:
		err = h.conn.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
			AND ((classid::bigint << 32) | objid::bigint) = $1)`, int64(h.s.lockKey(h.node))).Scan(&held)
	default:
		err = h.conn.QueryRowContext(ctx, `SELECT COALESCE(IS_USED_LOCK(?) = CONNECTION_ID(), FALSE)`, h.s.lockName(h.node)).Scan(&held)
	}
	if err != nil {
		if ctx.Err() == nil {
			// Not a timeout: the session or its connection is gone.
			err = errors.Join(err, heartbeat.ErrSessionLost)
		}
		return h.s.fail(ctx, op, err)
	}
	if !held {
		return h.s.fail(ctx, op, fmt.Errorf("the session no longer holds it: %w", heartbeat.ErrSessionLost))
	}
	return nil
}

// Release implements [heartbeat.SessionHold]: it unlocks (waiting at
// most releaseTimeout for the database), then closes the connection
// instead of returning it to the pool, so the database ends the session,
// and the lock with it, even if the unlock did not reach it.
func (h *sqlHold) Release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = h.s.unlock(ctx, h.conn, h.node) // a dead session has no lock to release
	discard(h.conn)
	h.conn = nil
	h.s.untrack(h)
	return nil
}

// track records h for Close, which releases it. If the store closed
// meanwhile, it releases h and fails.
func (s *Store) track(op string, h heartbeat.SessionHold) (heartbeat.SessionHold, error) {
	s.holdsMu.Lock()
	if s.closed.Load() {
		s.holdsMu.Unlock()
		_ = h.Release()
		return nil, fmt.Errorf("sqlstore: %s: %w", op, heartbeat.ErrClosed)
	}
	if s.holds == nil {
		s.holds = make(map[heartbeat.SessionHold]struct{})
	}
	s.holds[h] = struct{}{}
	s.holdsMu.Unlock()
	return h, nil
}

// untrack forgets h, released.
func (s *Store) untrack(h heartbeat.SessionHold) {
	s.holdsMu.Lock()
	defer s.holdsMu.Unlock()
	delete(s.holds, h)
}

// releaseTimeout bounds the unlock of Release.
const releaseTimeout = time.Second

// discard closes conn's connection instead of returning it to the pool:
// the database ends its session, and every lock the session held.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close() // already closed: ErrConnDone
}

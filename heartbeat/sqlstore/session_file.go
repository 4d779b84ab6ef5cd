package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cloudbus-go/cloudbus/heartbeat"
)

// errNoLockFile: an in-memory SQLite database has no file to lock beside.
var errNoLockFile = errors.New("an in-memory SQLite database has no file beside which to lock; use a database file")

// lockPath returns the lock file of node: beside the database file,
// named by lockKey. The file's name is read once from PRAGMA
// database_list.
func (s *Store) lockPath(ctx context.Context, node string) (string, error) {
	s.dbFileMu.Lock()
	defer s.dbFileMu.Unlock()
	if s.dbFile == "" {
		file, err := databaseFile(ctx, s.db)
		if err != nil {
			return "", err
		}
		s.dbFile = file
	}
	return fmt.Sprintf("%s-cloudbus-%016x.lock", s.dbFile, s.lockKey(node)), nil
}

// databaseFile returns the file of db's main database.
func databaseFile(ctx context.Context, db *sql.DB) (string, error) {
	rows, err := db.QueryContext(ctx, `PRAGMA database_list`)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var file string
	for rows.Next() {
		var seq int
		var name, f string
		if err := rows.Scan(&seq, &name, &f); err != nil {
			return "", err
		}
		if name == "main" {
			file = f
		}
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	if file == "" {
		return "", errNoLockFile
	}
	return file, nil
}

// holdFile takes node's lock file on SQLite.
func (s *Store) holdFile(ctx context.Context, op, node string) (heartbeat.SessionHold, error) {
	path, err := s.lockPath(ctx, node)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	ok, err := tryFlock(f)
	if err != nil {
		_ = f.Close()
		return nil, s.fail(ctx, op, err)
	}
	if !ok || !samePath(f, path) {
		// Held; or the file was a releasing holder's, which removed it
		// meanwhile: a lock on it would not be seen at path.
		_ = f.Close()
		return nil, fmt.Errorf("sqlstore: %s: %w", op, heartbeat.ErrSessionHeld)
	}
	return s.track(op, &fileHold{s: s, node: node, path: path, f: f})
}

// samePath reports whether path still names f's file.
func samePath(f *os.File, path string) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	pi, err := os.Stat(path)
	return err == nil && os.SameFile(fi, pi)
}

// fileFree tests node's lock file: a missing file is free (the node never
// held it, or released it and removed it).
func (s *Store) fileFree(ctx context.Context, op, node string) (bool, error) {
	path, err := s.lockPath(ctx, node)
	if err != nil {
		return false, s.fail(ctx, op, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, s.fail(ctx, op, err)
	}
	defer f.Close() // closing the descriptor releases a lock it took
	ok, err := tryFlock(f)
	if err != nil {
		return false, s.fail(ctx, op, err)
	}
	return ok, nil
}

// fileHold is a lock file held with flock(2): the kernel releases it when
// the process exits, however it ends.
type fileHold struct {
	s    *Store
	node string
	path string

	mu sync.Mutex
	f  *os.File // nil once released
}

// Check implements [heartbeat.SessionHold]: a file lock lives as long as
// its descriptor, so only a released hold fails.
func (h *fileHold) Check(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.f == nil {
		return fmt.Errorf("sqlstore: check the session lock of node %s: released: %w", h.node, heartbeat.ErrSessionLost)
	}
	return ctx.Err()
}

// Release implements [heartbeat.SessionHold]: it removes the file, then
// closes it, which releases the lock.
func (h *fileHold) Release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.f == nil {
		return nil
	}
	rmErr := os.Remove(h.path)
	err := h.f.Close()
	h.f = nil
	h.s.untrack(h)
	if errors.Is(rmErr, os.ErrNotExist) {
		rmErr = nil
	}
	return errors.Join(err, rmErr)
}

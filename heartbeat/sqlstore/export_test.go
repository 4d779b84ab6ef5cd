package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/cloudbus-go/cloudbus/heartbeat"
)

// ListSQL returns the store's List statement.
func (s *Store) ListSQL() string { return s.st.list }

// SchemaVersion is the schema version this code writes.
const SchemaVersion = schemaVersion

// CreateV1 creates table and its meta table at schema version 1, with
// version 1's statements, as the release before the bus status and the
// queue book did.
func CreateV1(ctx context.Context, db *sql.DB, d Dialect, table string) error {
	st := newStatements(d, table)
	st.migrations = st.migrations[:1]
	_, err := migrate(ctx, db, d, st, table)
	return err
}

// EndSession ends the session of h as a crash would: the server
// terminates it (pg_terminate_backend, KILL), or, on SQLite, the lock
// file's descriptor closes and the file stays.
func EndSession(t *testing.T, s *Store, h heartbeat.SessionHold) {
	t.Helper()
	switch h := h.(type) {
	case *sqlHold:
		var err error
		if s.dialect == Postgres {
			_, err = s.db.ExecContext(t.Context(), `SELECT pg_terminate_backend($1)`, h.session)
		} else {
			_, err = s.db.ExecContext(t.Context(), fmt.Sprintf("KILL %d", h.session))
		}
		if err != nil {
			t.Fatalf("end session %d: %v", h.session, err)
		}
	case *fileHold:
		h.mu.Lock()
		defer h.mu.Unlock()
		if err := h.f.Close(); err != nil {
			t.Fatalf("close the lock file: %v", err)
		}
		h.f = nil
	default:
		t.Fatalf("EndSession: %T is not a hold of this package", h)
	}
}

// LockKey returns the key of node's session lock.
func (s *Store) LockKey(node string) uint64 { return s.lockKey(node) }

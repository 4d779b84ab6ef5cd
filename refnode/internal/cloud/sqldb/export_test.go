package sqldb

import (
	"context"
	"database/sql"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// Drop deletes the store's tables, for test cleanup.
func (s *Store) Drop(ctx context.Context) error { return s.drop(ctx) }

// Statements returns the store's SQL for one kind ("host", "image",
// "vm", "job"): its insert, locking read and update.
func (s *Store) Statements(kind string) (insert, lockGet, update string) {
	t := map[string]tableSQL{"host": s.st.hosts, "image": s.st.images, "vm": s.st.vms, "job": s.st.jobs}[kind]
	return t.insert, t.lockGet, t.update
}

// MigrateTo creates the tables of prefix on db at schema version v, with
// that version's statements, as a node of that version did.
func MigrateTo(ctx context.Context, db *sql.DB, d sqlconn.Dialect, prefix string, v int) error {
	schema := newStatements(d, prefix).schema
	schema.Migrations = schema.Migrations[:v]
	_, err := schema.Migrate(ctx, db)
	return err
}

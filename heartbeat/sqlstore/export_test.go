package sqlstore

import (
	"context"
	"database/sql"
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

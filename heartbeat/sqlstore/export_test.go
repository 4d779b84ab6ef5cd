package sqlstore

import "context"

// Drop deletes the store's tables, for test cleanup.
func (s *Store) Drop(ctx context.Context) error { return s.drop(ctx) }

// ListSQL returns the store's List statement.
func (s *Store) ListSQL() string { return s.st.list }

// SchemaVersion is the schema version this code writes.
const SchemaVersion = schemaVersion

package sqlstore

// ListSQL returns the store's List statement.
func (s *Store) ListSQL() string { return s.st.list }

// SchemaVersion is the schema version this code writes.
const SchemaVersion = schemaVersion

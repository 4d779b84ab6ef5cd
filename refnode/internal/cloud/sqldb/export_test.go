package sqldb

import "context"

// Drop deletes the store's tables, for test cleanup.
func (s *Store) Drop(ctx context.Context) error { return s.drop(ctx) }

// Statements returns the store's SQL for one kind ("host", "image",
// "vm"): its insert, locking read and update.
func (s *Store) Statements(kind string) (insert, lockGet, update string) {
	t := map[string]tableSQL{"host": s.st.hosts, "image": s.st.images, "vm": s.st.vms}[kind]
	return t.insert, t.lockGet, t.update
}

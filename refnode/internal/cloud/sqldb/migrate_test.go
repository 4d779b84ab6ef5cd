package sqldb_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
)

// TestMigrateVersions creates the record tables at schema version 1 with
// version 1's statements on each database, with a VM row as version 1
// wrote it, and opens today's store on them: the VM table gains its
// version column, the row is at version 1 and moves up with its updates.
// Then the meta row is lost and the store opened again: PostgreSQL and
// MySQL run the migration again without harm and keep the versions;
// SQLite, which cannot add a column only if it is missing, refuses to
// open rather than set the versions back.
func TestMigrateVersions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"SQLite", func(t *testing.T) string { return sqliteURL(t) }},
		{"Postgres", func(t *testing.T) string { return testenv.PostgresDSN(t) }},
		{"MySQL", func(t *testing.T) string { return testenv.MySQLDSN(t) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			p := openPool(t, c.url(t))
			d := p.URL.Dialect
			prefix := randomPrefix()
			q := func(suffix string) string { return sqlconn.QuoteIdent(d, prefix+suffix) }
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				s, err := sqldb.Open(ctx, p, sqldb.Config{Prefix: prefix})
				if err == nil {
					assert.NoError(t, s.Drop(ctx))
					return
				}
				for _, table := range []string{"_hosts", "_images", "_vms", "_meta"} { // SQLite refused to open
					_, err := p.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+q(table))
					assert.NoError(t, err)
				}
			})
			require.NoError(t, sqldb.MigrateTo(ctx, p.DB, d, prefix, 1))
			const vm = "932763162d054c04adaab6ab498c9139"
			_, err := p.DB.ExecContext(ctx, sqlconn.Rebind(d, "INSERT INTO "+q("_vms")+
				" (uuid, name, image_uuid, host_uuid, cpus, memory_mb, state) VALUES (?, 'old', '', '', 1, 512, 'running')"), vm)
			require.NoError(t, err, "a row as schema version 1 wrote it")

			s, err := sqldb.Open(ctx, p, sqldb.Config{Prefix: prefix})
			require.NoError(t, err, "today's store opens and migrates tables of schema version 1")
			got, err := s.VM(ctx, vm)
			require.NoError(t, err)
			assert.Equal(t, cloud.VM{UUID: vm, Name: "old", CPUs: 1, MemoryMB: 512, State: cloud.VMRunning, Version: 1}, got,
				"a row of schema version 1 is at version 1")
			got, err = s.UpdateVM(ctx, vm, func(v *cloud.VM) error { v.State = cloud.VMStopped; return nil })
			require.NoError(t, err)
			assert.Equal(t, int64(2), got.Version)
			var version int
			require.NoError(t, p.DB.QueryRowContext(ctx, "SELECT version FROM "+q("_meta")+" WHERE id = 1").Scan(&version))
			assert.Equal(t, 2, version, "the meta row says schema version 2")
			require.NoError(t, s.Close())

			_, err = p.DB.ExecContext(ctx, "DELETE FROM "+q("_meta"))
			require.NoError(t, err, "lose the meta row")
			s, err = sqldb.Open(ctx, p, sqldb.Config{Prefix: prefix})
			if d == sqlconn.SQLite {
				require.Error(t, err, "SQLite cannot add the column again: it refuses to open")
				assert.ErrorContains(t, err, "duplicate column name: version")
				return
			}
			require.NoError(t, err, "the migration runs again on tables it migrated")
			defer s.Close()
			got, err = s.VM(ctx, vm)
			require.NoError(t, err)
			assert.Equal(t, int64(2), got.Version, "running the migration again keeps the versions")
		})
	}
}

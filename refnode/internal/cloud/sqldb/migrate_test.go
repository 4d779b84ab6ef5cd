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
				for _, table := range []string{"_hosts", "_images", "_vms", "_jobs", "_meta"} { // SQLite refused to open
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
			assert.Equal(t, 3, version, "the meta row says today's schema version, 3")
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

// TestMigrateVersion2 creates the record tables at schema version 2 with
// version 2's statements on each database, with a row in each as version
// 2 wrote them, and opens today's store on them: migration 3 adds the
// jobs' table, every row stays as it was, and jobs are added and updated
// like on new tables. Then the meta row is lost and the store opened
// again: PostgreSQL and MySQL run every migration again and keep the
// rows, the jobs' included; SQLite refuses to open (version 2's column
// cannot be added again), as after version 2.
func TestMigrateVersion2(t *testing.T) {
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
				for _, table := range []string{"_hosts", "_images", "_vms", "_jobs", "_meta"} { // SQLite refused to open
					_, err := p.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+q(table))
					assert.NoError(t, err)
				}
			})
			require.NoError(t, sqldb.MigrateTo(ctx, p.DB, d, prefix, 2))
			const host, img, vm, job = "1b2c3d4e5f6041828394a5b6c7d8e901", "0a1b2c3d4e5f40718293a4b5c6d7e801", "932763162d054c04adaab6ab498c9139", "3d4e5f6a7b8041a28394a5b6c7d8e901"
			for _, stmt := range []struct {
				sql  string
				args []any
			}{
				{"INSERT INTO " + q("_hosts") + " (uuid, name, address, status, managed_by, takeovers, connected_us) VALUES (?, 'kvm-01', '10.0.0.11', 'connected', '', 2, 1748781296789012)", []any{host}},
				{"INSERT INTO " + q("_images") + " (uuid, name, url, size_mb) VALUES (?, 'ubuntu', 'http://x', 2252)", []any{img}},
				{"INSERT INTO " + q("_vms") + " (uuid, name, image_uuid, host_uuid, cpus, memory_mb, state, version) VALUES (?, 'web', ?, ?, 2, 2048, 'running', 5)", []any{vm, img, host}},
			} {
				_, err := p.DB.ExecContext(ctx, sqlconn.Rebind(d, stmt.sql), stmt.args...)
				require.NoError(t, err, "a row as schema version 2 wrote it")
			}
			wantHost := cloud.Host{UUID: host, Name: "kvm-01", Address: "10.0.0.11", Status: cloud.HostConnected, Takeovers: 2, ConnectedAt: time.UnixMicro(1748781296789012).UTC()}
			wantImg := cloud.Image{UUID: img, Name: "ubuntu", URL: "http://x", SizeMB: 2252}
			wantVM := cloud.VM{UUID: vm, Name: "web", ImageUUID: img, HostUUID: host, CPUs: 2, MemoryMB: 2048, State: cloud.VMRunning, Version: 5}
			checkRows := func(s *sqldb.Store, what string) {
				t.Helper()
				h, err := s.Host(ctx, host)
				require.NoError(t, err)
				assert.Equal(t, wantHost, h, "%s: the host row is kept", what)
				i, err := s.Image(ctx, img)
				require.NoError(t, err)
				assert.Equal(t, wantImg, i, "%s: the image row is kept", what)
				v, err := s.VM(ctx, vm)
				require.NoError(t, err)
				assert.Equal(t, wantVM, v, "%s: the VM row is kept, its version too", what)
			}

			s, err := sqldb.Open(ctx, p, sqldb.Config{Prefix: prefix})
			require.NoError(t, err, "today's store opens and migrates tables of schema version 2")
			var version int
			require.NoError(t, p.DB.QueryRowContext(ctx, "SELECT version FROM "+q("_meta")+" WHERE id = 1").Scan(&version))
			assert.Equal(t, 3, version, "the meta row says schema version 3")
			checkRows(s, "migrated to version 3")
			jobs, err := s.Jobs(ctx)
			require.NoError(t, err)
			assert.Empty(t, jobs, "the jobs' table starts empty")
			created := time.UnixMicro(1764480000123456).UTC()
			require.NoError(t, s.AddJob(ctx, cloud.Job{UUID: job, Kind: "vm.migrate", Resource: vm, Args: `{"host_uuid":"` + host + `"}`, State: cloud.JobPending, CreatedAt: created, UpdatedAt: created}))
			got, err := s.UpdateJob(ctx, job, func(j *cloud.Job) error { j.State, j.Step = cloud.JobRunning, "checked"; return nil })
			require.NoError(t, err)
			wantJob := cloud.Job{UUID: job, Kind: "vm.migrate", Resource: vm, Args: `{"host_uuid":"` + host + `"}`, State: cloud.JobRunning, Step: "checked",
				CreatedAt: created, UpdatedAt: created, Version: 2}
			assert.Equal(t, wantJob, got)
			_, err = s.UpdateVM(ctx, vm, func(*cloud.VM) error { return nil })
			require.NoError(t, err)
			wantVM.Version = 6
			require.NoError(t, s.Close())

			_, err = p.DB.ExecContext(ctx, "DELETE FROM "+q("_meta"))
			require.NoError(t, err, "lose the meta row")
			s, err = sqldb.Open(ctx, p, sqldb.Config{Prefix: prefix})
			if d == sqlconn.SQLite {
				require.Error(t, err, "SQLite cannot add version 2's column again: it refuses to open")
				assert.ErrorContains(t, err, "duplicate column name: version")
				return
			}
			require.NoError(t, err, "the migrations run again on tables they migrated")
			defer s.Close()
			checkRows(s, "migrated again")
			got, err = s.Job(ctx, job)
			require.NoError(t, err)
			assert.Equal(t, wantJob, got, "running migration 3 again keeps the jobs")
		})
	}
}

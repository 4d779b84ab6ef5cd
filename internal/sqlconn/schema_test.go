package sqlconn_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// testSchema is a schema of one or two record tables beside a meta
// table with a counter; versions lists the migrations it knows.
func testSchema(d sqlconn.Dialect, base string, versions int) sqlconn.Schema {
	steps := [][]string{
		{"CREATE TABLE " + sqlconn.QuoteIdent(d, base+"_a") + " (k INTEGER NOT NULL PRIMARY KEY)"},
		{"CREATE TABLE " + sqlconn.QuoteIdent(d, base+"_b") + " (k INTEGER NOT NULL PRIMARY KEY)"},
	}
	return sqlconn.Schema{
		Dialect: d, Meta: base + "_meta", Counters: []string{"last_epoch"}, Migrations: steps[:versions],
		Lock: "cloudbus.sqlconntest." + base, Owner: "test", Elsewhere: "use another base name",
	}
}

// dropAfter drops the schema's tables at the end of the test.
func dropAfter(t *testing.T, p *sqlconn.Pool, base string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d := p.URL.Dialect
		for _, stmt := range []string{
			"DROP TABLE IF EXISTS " + sqlconn.QuoteIdent(d, base+"_a"),
			"DROP TABLE IF EXISTS " + sqlconn.QuoteIdent(d, base+"_b"),
			testSchema(d, base, 0).DropMeta(),
		} {
			_, err := p.DB.ExecContext(ctx, stmt)
			assert.NoError(t, err, "cleanup: %s", stmt)
		}
	})
}

// TestMigrate creates the tables at version 1, finds them current, takes
// them to version 2, and refuses them to code that knows version 1 only.
func TestMigrate(t *testing.T) {
	t.Parallel()
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			p := open(t, sqlconn.Config{URL: db.url(t)})
			base := randomName()
			dropAfter(t, p, base)
			ctx, d := t.Context(), p.URL.Dialect

			v1 := testSchema(d, base, 1)
			found, err := v1.Migrate(ctx, p.DB)
			require.NoError(t, err)
			assert.Equal(t, 0, found, "new tables")
			var counter int64
			require.NoError(t, p.DB.QueryRowContext(ctx, "SELECT last_epoch FROM "+sqlconn.QuoteIdent(d, base+"_meta")+" WHERE id = 1").Scan(&counter))
			assert.Zero(t, counter, "a counter of the meta row starts at 0")
			found, err = v1.Migrate(ctx, p.DB)
			require.NoError(t, err)
			assert.Equal(t, 1, found, "current tables are left alone")

			v2 := testSchema(d, base, 2)
			found, err = v2.Migrate(ctx, p.DB)
			require.NoError(t, err)
			assert.Equal(t, 1, found)
			_, err = p.DB.ExecContext(ctx, "INSERT INTO "+sqlconn.QuoteIdent(d, base+"_b")+" (k) VALUES (1)")
			require.NoError(t, err, "the migration to version 2 ran")

			_, err = v1.Migrate(ctx, p.DB)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "the tables have schema version 2, newer than this test knows (1): upgrade this node, or use another base name")
		})
	}
}

// TestMigrateFails: a failing migration is reported with the versions,
// and the version is not recorded, so the next Migrate tries again.
func TestMigrateFails(t *testing.T) {
	t.Parallel()
	p := open(t, sqlconn.Config{URL: sqliteURL(t)})
	base := randomName()
	bad := testSchema(sqlconn.SQLite, base, 1)
	bad.Migrations = [][]string{{"CREATE TABLE nonsense ("}}
	_, err := bad.Migrate(t.Context(), p.DB)
	require.ErrorContains(t, err, "migrate the schema from version 0 to 1")
	found, err := testSchema(sqlconn.SQLite, base, 1).Migrate(t.Context(), p.DB)
	require.NoError(t, err)
	assert.Equal(t, 0, found, "the failed migration recorded nothing (SQLite: rolled back whole)")
}

// TestConcurrentMigrate migrates new tables from several pools at once,
// as nodes starting together do: the schema lock makes exactly one
// create them, and none fails. On SQLite the file is brand new, so the
// pools also race to switch it to WAL.
func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			url := db.url(t)
			base := randomName()
			const n = 4
			pools := make([]*sqlconn.Pool, n)
			for i := range pools {
				pools[i] = open(t, sqlconn.Config{URL: url, MaxOpenConns: 1})
			}
			dropAfter(t, pools[0], base)
			found := make([]int, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i, p := range pools {
				wg.Go(func() { found[i], errs[i] = testSchema(p.URL.Dialect, base, 2).Migrate(t.Context(), p.DB) })
			}
			wg.Wait()
			creators := 0
			for i, err := range errs {
				require.NoError(t, err, "concurrent Migrate %d", i)
				if found[i] == 0 {
					creators++
				} else {
					assert.Equal(t, 2, found[i], "the others find the tables done")
				}
			}
			assert.Equal(t, 1, creators, "exactly one Migrate creates the tables: %v", found)
		})
	}
}

// TestSchemaLockExcludes: while one caller holds a lock, another caller of
// the same name waits; a caller of another name does not.
func TestSchemaLockExcludes(t *testing.T) {
	t.Parallel()
	for _, db := range databases {
		if db.name == "sqlite" {
			continue // SQLite's lock is the file's write lock: one holder whatever the name
		}
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			url := db.url(t)
			a, b := open(t, sqlconn.Config{URL: url}), open(t, sqlconn.Config{URL: url})
			name := "cloudbus.sqlconntest." + randomName()
			held, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- sqlconn.WithSchemaLock(t.Context(), a.DB, a.URL.Dialect, name, func(context.Context, sqlconn.Execer) error {
					close(held)
					<-release
					return nil
				})
			}()
			<-held
			require.NoError(t, sqlconn.WithSchemaLock(t.Context(), b.DB, b.URL.Dialect, name+".other", func(context.Context, sqlconn.Execer) error { return nil }),
				"another name is not blocked")
			got := make(chan time.Time, 1)
			go func() {
				_ = sqlconn.WithSchemaLock(t.Context(), b.DB, b.URL.Dialect, name, func(context.Context, sqlconn.Execer) error {
					got <- time.Now()
					return nil
				})
			}()
			select {
			case <-got:
				t.Fatal("a second holder of the same lock got it while the first held it")
			case <-time.After(200 * time.Millisecond):
			}
			released := time.Now()
			close(release)
			require.NoError(t, <-done)
			select {
			case at := <-got:
				assert.False(t, at.Before(released), "the second holder got the lock after the first released it")
			case <-time.After(10 * time.Second):
				t.Fatal("the second holder did not get the lock within 10 s of its release")
			}
		})
	}
}

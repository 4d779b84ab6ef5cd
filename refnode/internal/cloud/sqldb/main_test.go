package sqldb_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
)

func TestMain(m *testing.M) {
	if os.Getenv(childURL) != "" {
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m)
}

// envDSN returns the variable's value. Without it the test skips, naming
// the variable, or fails under CI=true, where the database must be there.
func envDSN(t testing.TB, name, example string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set, and CI=true requires these database tests to run", name)
		}
		t.Skipf("set %s (e.g. %s) to run this test", name, example)
	}
	return v
}

func postgresDSN(t testing.TB) string {
	return envDSN(t, "CLOUDBUS_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

func mysqlDSN(t testing.TB) string {
	return envDSN(t, "CLOUDBUS_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test?parseTime=true")
}

// sqliteURL returns a database file in a fresh temporary directory.
func sqliteURL(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "refnode.db")
}

// randomPrefix returns a table prefix no other test uses: test processes
// of many packages share the databases.
func randomPrefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "sqldbtest_" + hex.EncodeToString(b)
}

// open opens a store and closes it at the end of the test.
func open(t testing.TB, cfg sqldb.Config) *sqldb.Store {
	t.Helper()
	s, err := sqldb.Open(t.Context(), cfg)
	require.NoError(t, err, "open %s", sqlstore.MaskURL(cfg.URL))
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// openFresh opens a store on new tables with a random prefix, and drops
// them and closes the store at the end of the test.
func openFresh(t testing.TB, url string) *sqldb.Store {
	t.Helper()
	cfg := sqldb.Config{URL: url, Prefix: randomPrefix()}
	s, err := sqldb.Open(t.Context(), cfg)
	require.NoError(t, err, "open %s", sqlstore.MaskURL(url))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, s.Drop(ctx), "drop tables %v", s.Tables())
		require.NoError(t, s.Close())
	})
	return s
}

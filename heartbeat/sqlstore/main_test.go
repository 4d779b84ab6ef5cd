package sqlstore_test

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
)

func TestMain(m *testing.M) {
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
	return "sqlite:" + filepath.Join(t.TempDir(), "heartbeat.db")
}

// randomTable returns a table name no other test uses: test processes of
// many packages share the databases.
func randomTable() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "hbtest_" + hex.EncodeToString(b)
}

// cleanupCtx bounds a cleanup; t.Context is already done by then.
func cleanupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// open opens a store and closes it at the end of the test.
func open(t testing.TB, cfg sqlstore.Config) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.Open(t.Context(), cfg)
	require.NoError(t, err, "open %s", sqlstore.MaskURL(cfg.URL))
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// openFresh opens a store on a new random table, and drops the table and
// closes the store at the end of the test.
func openFresh(t testing.TB, url string) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: url, Table: randomTable()})
	require.NoError(t, err, "open %s", sqlstore.MaskURL(url))
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		require.NoError(t, s.Drop(ctx), "drop table %s", s.Table())
		require.NoError(t, s.Close())
	})
	return s
}

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

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
)

func TestMain(m *testing.M) {
	if os.Getenv(childURL) != "" {
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m)
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

// openPool opens a pool on url, as a process does, and closes it at the
// end of the test, after the stores on it.
func openPool(t testing.TB, url string) *sqlconn.Pool {
	t.Helper()
	p, err := sqlconn.Open(sqlconn.Config{URL: url})
	require.NoError(t, err, "open %s", sqlconn.MaskURL(url))
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// open opens a store on a pool of its own, as another process has, and
// closes both at the end of the test.
func open(t testing.TB, url string, cfg sqldb.Config) *sqldb.Store {
	t.Helper()
	s, err := sqldb.Open(t.Context(), openPool(t, url), cfg)
	require.NoError(t, err, "open %s", sqlconn.MaskURL(url))
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// openFresh opens a store on new tables with a random prefix, and drops
// them and closes the store at the end of the test.
func openFresh(t testing.TB, url string) *sqldb.Store {
	t.Helper()
	s, err := sqldb.Open(t.Context(), openPool(t, url), sqldb.Config{Prefix: randomPrefix()})
	require.NoError(t, err, "open %s", sqlconn.MaskURL(url))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, s.Drop(ctx), "drop tables %v", s.Tables())
		require.NoError(t, s.Close())
	})
	return s
}

package sqlstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
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
	require.NoError(t, err, "open %s", sqlconn.MaskURL(cfg.URL))
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// openFresh opens a store on a new random table, and drops the table and
// closes the store at the end of the test.
func openFresh(t testing.TB, url string) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: url, Table: randomTable()})
	require.NoError(t, err, "open %s", sqlconn.MaskURL(url))
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		require.NoError(t, s.Drop(ctx), "drop table %s", s.Table())
		require.NoError(t, s.Close())
	})
	return s
}

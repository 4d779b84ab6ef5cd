package sqlconn_test

import (
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sqliteURL returns a database file in a fresh temporary directory.
func sqliteURL(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "sqlconn.db")
}

// databases are the databases every dialect test runs on; Postgres and
// MySQL skip without their variables (fail under CI=true).
var databases = []struct {
	name string
	url  func(testing.TB) string
}{{"sqlite", sqliteURL}, {"postgres", testenv.PostgresDSN}, {"mysql", testenv.MySQLDSN}}

// randomName returns a table name no other test uses: test processes of
// many packages share the databases.
func randomName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "sqlconntest_" + hex.EncodeToString(b)
}

// open opens a pool and closes it at the end of the test.
func open(t testing.TB, cfg sqlconn.Config) *sqlconn.Pool {
	t.Helper()
	p, err := sqlconn.Open(cfg)
	require.NoError(t, err, "open %s", sqlconn.MaskURL(cfg.URL))
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

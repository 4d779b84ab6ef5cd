package sqldb_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/cloudtest"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
)

// runSuite runs the Store suite on url: every case on new tables, and
// its peer a second Store (its own pool, as another process has) on the
// same tables.
func runSuite(t *testing.T, url string, want sqlconn.Dialect) {
	var mu sync.Mutex
	prefixes := map[cloud.Store]string{}
	cloudtest.Run(t, cloudtest.Harness{
		New: func(t *testing.T) cloud.Store {
			s := openFresh(t, url)
			require.Equal(t, want, s.Dialect())
			mu.Lock()
			prefixes[s] = strings.TrimSuffix(s.Tables()[0], "_hosts")
			mu.Unlock()
			return s
		},
		Peer: func(t *testing.T, s cloud.Store) cloud.Store {
			mu.Lock()
			prefix := prefixes[s]
			mu.Unlock()
			return open(t, url, sqldb.Config{Prefix: prefix})
		},
	})
}

func TestConformanceSQLite(t *testing.T) {
	t.Parallel()
	runSuite(t, sqliteURL(t), sqlconn.SQLite)
}

func TestConformancePostgres(t *testing.T) {
	t.Parallel()
	runSuite(t, testenv.PostgresDSN(t), sqlconn.Postgres)
}

func TestConformanceMySQL(t *testing.T) {
	t.Parallel()
	runSuite(t, testenv.MySQLDSN(t), sqlconn.MySQL)
}

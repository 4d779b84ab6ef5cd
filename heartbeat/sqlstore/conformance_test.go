package sqlstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/heartbeat/storetest"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
)

// runSuite runs the conformance suite on one store shared by every
// scenario, as one table shared by many nodes is.
func runSuite(t *testing.T, url string, want sqlstore.Dialect) {
	s := openFresh(t, url)
	require.Equal(t, want, s.Dialect())
	storetest.Run(t, storetest.Harness{
		New:        func(t *testing.T) heartbeat.Store { return s },
		EndSession: endSession,
	})
}

func TestConformanceSQLite(t *testing.T) {
	t.Parallel()
	runSuite(t, sqliteURL(t), sqlstore.SQLite)
}

func TestConformancePostgres(t *testing.T) {
	t.Parallel()
	runSuite(t, testenv.PostgresDSN(t), sqlstore.Postgres)
}

func TestConformanceMySQL(t *testing.T) {
	t.Parallel()
	runSuite(t, testenv.MySQLDSN(t), sqlstore.MySQL)
}

// TestConformanceSQLiteStorePerScenario gives every scenario a Store of
// its own (its own pool, as another process would have) on one file and
// table that all of them share.
func TestConformanceSQLiteStorePerScenario(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	first := openFresh(t, url)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) heartbeat.Store {
			return open(t, sqlstore.Config{URL: url, Table: first.Table()})
		},
		EndSession: endSession,
	})
}

// endSession ends the session that holds a lock as a crash would.
func endSession(t *testing.T, s heartbeat.Store, _ string, h heartbeat.SessionHold) {
	sqlstore.EndSession(t, s.(*sqlstore.Store), h)
}

package nodekit

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
)

func TestTableBase(t *testing.T) {
	for prefix, want := range map[string]string{
		"cloudbus":                  "cloudbus",
		"refnode-test-1a2b.Blue":    "refnode_test_1a2b_blue",
		"9lives":                    "_9lives",
		strings.Repeat("x", 100):    "xxxxxxxxxxxxxxx_",
		"refnode-test-0123456789ab": "refnode_test_01_",
	} {
		got := TableBase(prefix)
		assert.True(t, strings.HasPrefix(got, want), "TableBase(%q) = %q, want it to start with %q", prefix, got, want)
		assert.LessOrEqual(t, len(got), 24)
	}
	assert.NotEqual(t, TableBase(strings.Repeat("x", 100)), TableBase(strings.Repeat("x", 99)), "long prefixes keep apart")
}

// TestIdleTimeoutURL: a node bounds a transaction's idle time to
// EvictAfter on PostgreSQL and MariaDB, unless the URL sets it.
func TestIdleTimeoutURL(t *testing.T) {
	const d = 2500 * time.Millisecond
	pg, set := postgresIdleTimeout("postgres://u:pw@db:5432/x?sslmode=disable", d)
	assert.Equal(t, "postgres://u:pw@db:5432/x?idle_in_transaction_session_timeout=2500&sslmode=disable", pg)
	assert.Equal(t, "idle_in_transaction_session_timeout=2500", set)
	kept := "postgres://u@db/x?idle_in_transaction_session_timeout=900"
	got, set := postgresIdleTimeout(kept, d)
	assert.Equal(t, kept, got, "the URL's own setting wins")
	assert.Equal(t, "idle_in_transaction_session_timeout=900", set)

	maria, _ := mariaDBIdleTimeout("mysql://u:pw@db:3306/x?parseTime=true", d)
	assert.Equal(t, "mysql://u:pw@db:3306/x?idle_transaction_timeout=3&parseTime=true", maria, "whole seconds, rounded up")
	dsn, _ := mariaDBIdleTimeout("u:p?w@tcp(db:3306)/x?parseTime=true", time.Millisecond)
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	assert.Equal(t, "p?w", cfg.Passwd)
	assert.True(t, cfg.ParseTime)
	assert.Equal(t, map[string]string{"idle_transaction_timeout": "1"}, cfg.Params, "at least 1 s")
	keptDSN := "u@tcp(db:3306)/x?idle_transaction_timeout=60"
	got, _ = mariaDBIdleTimeout(keptDSN, d)
	assert.Equal(t, keptDSN, got)
}

// TestSQLiteNeedsNoSetting: SQLite gets no idle setting: a dead
// process's lock dies with it.
func TestSQLiteNeedsNoSetting(t *testing.T) {
	d, err := OpenDatabase(t.Context(), DatabaseConfig{URL: "sqlite:" + filepath.Join(t.TempDir(), "x.db"), HeartbeatTable: "hb"})
	require.NoError(t, err)
	defer d.Close()
	assert.Empty(t, d.IdleTimeout)
	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "Close is idempotent")
}

// TestPostgresSessionSetting: the services' pool and the heartbeat
// pool of a node on PostgreSQL run with idle_in_transaction_session_timeout
// set to EvictAfter, as SHOW reads it.
func TestPostgresSessionSetting(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	table := "nk_" + strings.ToLower(message.NewUUID()[:12]) + "_heartbeat"
	d, err := OpenDatabase(t.Context(), DatabaseConfig{URL: dsn, HeartbeatTable: table, EvictAfter: 3 * time.Second})
	require.NoError(t, err)
	defer d.Close()
	defer func() { assert.NoError(t, d.Heartbeat.Drop(context.Background())) }()
	for _, db := range []*struct {
		name string
		got  string
	}{{name: "services"}, {name: "heartbeat"}} {
		pool := d.DB()
		if db.name == "heartbeat" {
			pool = d.HeartbeatDB()
		}
		require.NoError(t, pool.QueryRowContext(t.Context(), "SHOW idle_in_transaction_session_timeout").Scan(&db.got))
		assert.Equal(t, "3s", db.got, "the %s pool's session setting", db.name)
		t.Logf("%s pool: SHOW idle_in_transaction_session_timeout = %s", db.name, db.got)
	}
	assert.Equal(t, "idle_in_transaction_session_timeout=3000", d.IdleTimeout)
	assert.Equal(t, "3s", d.Shown)
}

// TestMariaDBEndsIdleTransactions: on MariaDB, the node's pools end a
// transaction left idle past EvictAfter, as PostgreSQL ends one past
// idle_in_transaction_session_timeout: a paused node's locks on its
// resources' token rows go with it.
func TestMariaDBEndsIdleTransactions(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	version, err := serverVersion(ctx, dsn)
	require.NoError(t, err)
	if !strings.Contains(strings.ToLower(version), "mariadb") {
		t.Skip("the server at CLOUDBUS_MYSQL_DSN is not MariaDB: MySQL has no idle_transaction_timeout")
	}
	table := "nk_" + strings.ToLower(message.NewUUID()[:12]) + "_heartbeat"
	d, err := OpenDatabase(ctx, DatabaseConfig{URL: dsn, HeartbeatTable: table, EvictAfter: time.Second})
	require.NoError(t, err)
	defer d.Close()
	defer func() { assert.NoError(t, d.Heartbeat.Drop(context.Background())) }()
	var name, shown string
	require.NoError(t, d.DB().QueryRowContext(ctx, "SHOW SESSION VARIABLES LIKE 'idle_transaction_timeout'").Scan(&name, &shown))
	assert.Equal(t, "1", shown)
	t.Logf("SHOW SESSION VARIABLES LIKE 'idle_transaction_timeout': %s", shown)
	other, err := sqlconn.Open(sqlconn.Config{URL: dsn})
	require.NoError(t, err)
	defer other.Close()

	tx, err := d.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var id int64
	require.NoError(t, tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id))
	idle := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		require.NoError(t, other.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n))
		if n == 0 {
			break
		}
		require.Less(t, time.Since(idle), 10*time.Second, "the server did not end the idle transaction")
		<-tick.C
	}
	t.Logf("MariaDB ended the transaction %s after its last statement (idle_transaction_timeout 1 s)", time.Since(idle).Round(time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(idle), 900*time.Millisecond, "not before the timeout")
	_, err = tx.ExecContext(ctx, "SELECT 1")
	assert.Error(t, err, "its next statement fails")
}

// TestMySQLRefused: on a MySQL server (played here by the MariaDB or any
// MySQL-dialect server at CLOUDBUS_MYSQL_DSN answering VERSION() as
// MySQL 8.0 would; this machine runs no MySQL), a node refuses to start
// with an error naming the risk and the option that accepts it; with the
// option it starts, without the setting.
func TestMySQLRefused(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	real := serverVersion
	t.Cleanup(func() { serverVersion = real })
	serverVersion = func(context.Context, string) (string, error) { return "8.0.36", nil }

	table := "nk_" + strings.ToLower(message.NewUUID()[:12]) + "_heartbeat"
	_, err := OpenDatabase(t.Context(), DatabaseConfig{URL: dsn, HeartbeatTable: table})
	require.ErrorIs(t, err, ErrNoIdleTimeout)
	for _, want := range []string{"MySQL 8.0.36", "no idle-transaction timeout", "hold its resources' rows", "AllowNoIdleTimeout", "-db-allow-no-idle-timeout"} {
		assert.Contains(t, err.Error(), want)
	}
	t.Logf("refused: %v", err)

	d, err := OpenDatabase(t.Context(), DatabaseConfig{URL: dsn, HeartbeatTable: table, AllowNoIdleTimeout: true})
	require.NoError(t, err)
	defer d.Close()
	defer func() { assert.NoError(t, d.Heartbeat.Drop(context.Background())) }()
	assert.Empty(t, d.IdleTimeout, "no setting on MySQL")

	serverVersion = func(context.Context, string) (string, error) { return "", errors.New("connection refused") }
	_, err = OpenDatabase(t.Context(), DatabaseConfig{URL: dsn, HeartbeatTable: table})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNoIdleTimeout, "a server that cannot be asked is not taken for MySQL")
	assert.Contains(t, err.Error(), "ask the server its version")
}

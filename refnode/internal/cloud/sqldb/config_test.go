package sqldb_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
)

const secret = "Pw-sqldb-never-shown"

func TestValidate(t *testing.T) {
	for _, ok := range []string{"", "refnode", "_x1", strings.Repeat("a", 40)} {
		assert.NoError(t, sqldb.Config{Prefix: ok}.Validate(), "Prefix %q", ok)
	}
	for _, bad := range []string{"Bad-Prefix", "1abc", "a.b", strings.Repeat("a", 41)} {
		err := sqldb.Config{Prefix: bad}.Validate()
		if assert.Error(t, err, "Prefix %q", bad) {
			assert.Contains(t, err.Error(), "sqldb: config: Prefix")
			assert.Contains(t, err.Error(), "at most 40")
		}
	}
}

// TestCredentialsNeverShown: a database that refuses the connection
// yields an error naming it masked, with the password nowhere.
func TestCredentialsNeverShown(t *testing.T) {
	for _, url := range []string{
		"postgres://refnode:" + secret + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=1",
		"mysql://refnode:" + secret + "@127.0.0.1:1/db?timeout=1s",
		"refnode:" + secret + "@tcp(127.0.0.1:1)/db?timeout=1s",
	} {
		p := openPool(t, url) // connects at the first statement
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := sqldb.Open(ctx, p, sqldb.Config{})
		cancel()
		require.Error(t, err, "nothing listens on port 1")
		assert.NotContains(t, err.Error(), secret, "the password never appears in an error")
		assert.Contains(t, err.Error(), "xxxxx", "the database is named, masked")
		assert.True(t, strings.HasPrefix(err.Error(), "sqldb: open tables refnode_* on "), "the error says what failed, where: %v", err)
	}
	_, err := sqldb.Open(t.Context(), nil, sqldb.Config{})
	assert.ErrorContains(t, err, "pool is nil")
}

func TestStatementsLockTheRow(t *testing.T) {
	s := openFresh(t, sqliteURL(t))
	for _, kind := range []string{"host", "image", "vm", "job"} {
		insert, lockGet, update := s.Statements(kind)
		assert.Contains(t, insert, "ON CONFLICT (uuid) DO NOTHING", "a duplicate add inserts nothing")
		assert.NotContains(t, lockGet, "FOR UPDATE", "SQLite has no FOR UPDATE: BEGIN IMMEDIATE takes the write lock")
		assert.Contains(t, update, "WHERE uuid = ?")
	}
	for name, dsn := range map[string]func(testing.TB) string{"postgres": testenv.PostgresDSN, "mysql": testenv.MySQLDSN} {
		t.Run(name, func(t *testing.T) {
			s := openFresh(t, dsn(t))
			for _, kind := range []string{"host", "image", "vm", "job"} {
				_, lockGet, _ := s.Statements(kind)
				assert.True(t, strings.HasSuffix(lockGet, " FOR UPDATE"), "an update locks its row first: %s", lockGet)
			}
		})
	}
}

// TestNewerSchemaRefused: a node must not write tables whose meaning a
// newer version changed.
func TestNewerSchemaRefused(t *testing.T) {
	url := sqliteURL(t)
	s := openFresh(t, url)
	prefix := strings.TrimSuffix(s.Tables()[0], "_hosts")
	db, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(url, "sqlite:"))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(t.Context(), `UPDATE "`+prefix+`_meta" SET version = 99`)
	require.NoError(t, err)
	_, err = sqldb.Open(t.Context(), openPool(t, url), sqldb.Config{Prefix: prefix})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "schema version 99, newer than this refnode knows")
}

// TestClosed: after Close every call fails with a coded error, Close is
// idempotent, and the pool stays open.
func TestClosed(t *testing.T) {
	p := openPool(t, sqliteURL(t))
	s, err := sqldb.Open(t.Context(), p, sqldb.Config{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = s.Hosts(t.Context())
	assert.ErrorIs(t, err, message.ErrClosed)
	assert.ErrorIs(t, s.AddHost(t.Context(), cloud.Host{UUID: message.NewUUID()}), message.ErrClosed)
	assert.NoError(t, p.DB.PingContext(t.Context()), "Close leaves the caller's pool open")
}

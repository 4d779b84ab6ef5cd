package sqldb_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/sqldb"
)

const secret = "Pw-sqldb-never-shown"

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  sqldb.Config
		want []string // substrings of the error; none: valid
	}{
		{"sqlite path", sqldb.Config{URL: "sqlite:refnode.db"}, nil},
		{"sqlite abs", sqldb.Config{URL: "sqlite:///var/lib/refnode.db"}, nil},
		{"file uri", sqldb.Config{URL: "file:/tmp/x.db?cache=shared"}, nil},
		{"postgres", sqldb.Config{URL: "postgres://u:" + secret + "@127.0.0.1:5432/db"}, nil},
		{"mysql url", sqldb.Config{URL: "mysql://u:" + secret + "@127.0.0.1/db?tls=false"}, nil},
		{"mysql dsn", sqldb.Config{URL: "u:" + secret + "@tcp(127.0.0.1:3306)/db"}, nil},
		{"empty", sqldb.Config{}, []string{"URL is required"}},
		{"memory", sqldb.Config{URL: "sqlite::memory:"}, []string{"in-memory SQLite"}},
		{"memory mode", sqldb.Config{URL: "file:x.db?mode=memory"}, []string{"in-memory SQLite"}},
		{"unknown", sqldb.Config{URL: "redis://u:" + secret + "@host"}, []string{"cannot tell the database", "xxxxx"}},
		{"everything at once", sqldb.Config{URL: "sqlite:", Prefix: "Bad-Prefix", MaxOpenConns: -1, BusyTimeout: -time.Second},
			[]string{"not a database file", `Prefix "Bad-Prefix"`, "MaxOpenConns -1", "BusyTimeout -1s"}},
		{"long prefix", sqldb.Config{URL: "sqlite:x.db", Prefix: strings.Repeat("a", 41)}, []string{"at most 40"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if c.want == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), secret, "a password never appears in an error")
		})
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
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := sqldb.Open(ctx, sqldb.Config{URL: url})
		cancel()
		require.Error(t, err, "nothing listens on port 1")
		assert.NotContains(t, err.Error(), secret, "the password never appears in an error")
		assert.Contains(t, err.Error(), "xxxxx", "the database is named, masked")
	}
}

func TestStatementsLockTheRow(t *testing.T) {
	s := openFresh(t, sqliteURL(t))
	for _, kind := range []string{"host", "vm"} {
		insert, lockGet, update := s.Statements(kind)
		assert.Contains(t, insert, "ON CONFLICT (uuid) DO NOTHING", "a duplicate add inserts nothing")
		assert.NotContains(t, lockGet, "FOR UPDATE", "SQLite has no FOR UPDATE: BEGIN IMMEDIATE takes the write lock")
		assert.Contains(t, update, "WHERE uuid = ?")
	}
	for name, dsn := range map[string]func(testing.TB) string{"postgres": postgresDSN, "mysql": mysqlDSN} {
		t.Run(name, func(t *testing.T) {
			s := openFresh(t, dsn(t))
			_, lockGet, _ := s.Statements("vm")
			assert.True(t, strings.HasSuffix(lockGet, " FOR UPDATE"), "an update locks its row first: %s", lockGet)
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
	_, err = sqldb.Open(t.Context(), sqldb.Config{URL: url, Prefix: prefix})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "schema version 99, newer than this refnode knows")
}

// TestClosed: after Close every call fails with a coded error, and Close
// is idempotent.
func TestClosed(t *testing.T) {
	s, err := sqldb.Open(t.Context(), sqldb.Config{URL: sqliteURL(t)})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = s.Hosts(t.Context())
	assert.ErrorIs(t, err, message.ErrClosed)
	assert.ErrorIs(t, s.AddHost(t.Context(), cloud.Host{UUID: message.NewUUID()}), message.ErrClosed)
}

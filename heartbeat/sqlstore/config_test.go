package sqlstore_test

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
)

// secret is a password that must appear in no error and no log.
const secret = "Pw-5e1f0c-never-printed"

func TestValidate(t *testing.T) {
	err := sqlstore.Config{Table: "Bad-Name", MaxOpenConns: -1, BusyTimeout: -time.Second, Dialect: 9}.Validate()
	require.Error(t, err)
	for _, want := range []string{"URL is required", "Table", "MaxOpenConns", "BusyTimeout", "Dialect(9)"} {
		assert.Contains(t, err.Error(), want, "Validate reports every problem at once")
	}
	for _, bad := range []string{
		"sqlite::memory:",
		"file::memory:?cache=shared",
		"file:hb.db?mode=memory",
		"sqlite://host/hb.db",
		"sqlite:",
		"ftp://bob:" + secret + "@host/",
		"mysql://bob:" + secret + "@db:3306/x?timeout=notaduration",
		"bob:" + secret + "@tcp(db:3306)/x?timeout=notaduration",
	} {
		err := sqlstore.Config{URL: bad}.Validate()
		if assert.Error(t, err, "URL %q", bad) {
			assert.NotContains(t, err.Error(), secret)
			assert.True(t, strings.HasPrefix(err.Error(), "sqlstore: "), "errors carry the package prefix: %v", err)
		}
	}
	for _, good := range []string{
		"sqlite:/tmp/hb.db", "sqlite:hb.db", "sqlite:///tmp/hb.db", "file:/tmp/hb.db?_pragma=foreign_keys(1)",
		"postgres://u:p@h/db", "mysql://u:p@h/db", "u:p@tcp(h:3306)/db",
	} {
		assert.NoError(t, sqlstore.Config{URL: good}.Validate(), "URL %q", good)
	}
	assert.NoError(t, sqlstore.Config{URL: "host=h password=p", Dialect: sqlstore.Postgres}.Validate())
	assert.NoError(t, sqlstore.Config{URL: "sqlite:/tmp/x.db", Table: "myschema.hb_2"}.Validate())
	assert.NoError(t, sqlstore.Config{URL: "sqlite:/tmp/x.db", Table: strings.Repeat("t", 56)}.Validate(),
		"56 characters leave room for the suffix _queues within PostgreSQL's 63")
	assert.ErrorContains(t, sqlstore.Config{URL: "sqlite:/tmp/x.db", Table: strings.Repeat("t", 57)}.Validate(), "at most 56 characters")
	assert.Equal(t, "postgres", sqlstore.Postgres.String())
	assert.Equal(t, "Dialect(42)", sqlstore.Dialect(42).String())
}

// TestUnreachableMasksPassword opens databases that do not answer: the
// error names the operation and the masked URL, and holds no password;
// nor do the logs.
func TestUnreachableMasksPassword(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, c := range []struct {
		url     string
		dialect sqlstore.Dialect
	}{
		{"postgres://bob:" + secret + "@127.0.0.1:1/x?sslmode=disable&connect_timeout=5", 0},
		{"host=127.0.0.1 port=1 user=bob password=" + secret + " dbname=x sslmode=disable", sqlstore.Postgres},
		{"mysql://bob:" + secret + "@127.0.0.1:1/x?timeout=5s", 0},
		{"bob:" + secret + "@tcp(127.0.0.1:1)/x?timeout=5s", 0},
		{"sqlite:/nonexistent-dir-" + secret[:3] + "/sub/hb.db", 0},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err := sqlstore.Open(ctx, sqlstore.Config{URL: c.url, Dialect: c.dialect, Logger: logger})
		cancel()
		require.Error(t, err, "open %s", sqlconn.MaskURL(c.url))
		assert.NotContains(t, err.Error(), secret, "an error leaked the password")
		assert.Contains(t, err.Error(), "sqlstore: open table cloudbus_heartbeat on "+sqlconn.MaskURL(c.url), "the error says what failed, where")
		t.Logf("error (password masked): %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.NotContains(t, logs.String(), secret, "the logs leaked the password")
}

// TestWrongCredentials logs in to the real servers as a user that does
// not exist, with a password: the server refuses, and the error holds no
// password.
func TestWrongCredentials(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		u, err := url.Parse(testenv.PostgresDSN(t))
		require.NoError(t, err)
		u.User = url.UserPassword("cloudbus_nobody", secret)
		_, err = sqlstore.Open(t.Context(), sqlstore.Config{URL: u.String()})
		require.Error(t, err)
		assert.NotContains(t, err.Error(), secret)
		assert.Contains(t, err.Error(), "cloudbus_nobody:xxxxx@")
		t.Logf("error (password masked): %v", err)
	})
	t.Run("postgres pool of the caller", func(t *testing.T) {
		t.Parallel()
		u, err := url.Parse(testenv.PostgresDSN(t))
		require.NoError(t, err)
		u.User = url.UserPassword("cloudbus_nobody", secret)
		db, err := sql.Open("pgx", u.String())
		require.NoError(t, err)
		defer db.Close()
		_, err = sqlstore.OpenDB(t.Context(), db, sqlstore.Config{URL: u.String()})
		require.Error(t, err)
		assert.NotContains(t, err.Error(), secret, "OpenDB scrubs the passwords of Config.URL from driver errors")
		assert.Contains(t, err.Error(), "cloudbus_nobody:xxxxx@", "and names the database masked")
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.MySQLDSN(t)
		_, rest, ok := strings.Cut(dsn, "@")
		require.True(t, ok, testenv.MySQLVar+" has the form user[:password]@tcp(host:port)/db")
		_, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: "cloudbus_nobody:" + secret + "@" + rest})
		require.Error(t, err)
		assert.NotContains(t, err.Error(), secret)
		assert.Contains(t, err.Error(), "cloudbus_nobody:xxxxx@")
		t.Logf("error (password masked): %v", err)
	})
}

package sqlconn_test

import (
	"database/sql"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

func TestProblems(t *testing.T) {
	errs := sqlconn.Config{URL: "sqlite:", Dialect: 9, MaxOpenConns: -1, BusyTimeout: -time.Second}.Problems()
	var all []string
	for _, err := range errs {
		all = append(all, err.Error())
	}
	for _, want := range []string{"unknown Dialect(9)", "MaxOpenConns -1 is negative", "BusyTimeout -1s is negative"} {
		assert.Contains(t, strings.Join(all, "\n"), want, "Problems reports every problem")
	}
	assert.Len(t, errs, 3, "an unknown dialect is reported once, not again by the URL: %v", all)
	assert.Len(t, sqlconn.Config{URL: "sqlite:"}.Problems(), 1)
	assert.Empty(t, sqlconn.Config{}.Problems(), "an empty URL is the caller's to report")
	assert.Empty(t, sqlconn.Config{URL: "postgres://u:p@h/db", MaxOpenConns: 2, BusyTimeout: time.Second}.Problems())
}

func TestOpenErrors(t *testing.T) {
	_, err := sqlconn.Open(sqlconn.Config{})
	assert.ErrorContains(t, err, "URL is required")
	_, err = sqlconn.Open(sqlconn.Config{URL: "sqlite::memory:", MaxOpenConns: -1})
	assert.ErrorContains(t, err, "in-memory SQLite")
	assert.ErrorContains(t, err, "MaxOpenConns")
	// pgx refuses the sslmode when it parses its configuration: the
	// error names the URL masked.
	_, err = sqlconn.Open(sqlconn.Config{URL: "postgres://bob:" + secret + "@db/x?sslmode=bogus"})
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "open postgres://bob:xxxxx@db/x?sslmode=bogus")
		assert.NotContains(t, err.Error(), secret)
	}
}

// TestOpen opens a pool on every dialect without connecting, then
// connects: the pool knows its dialect and masked URL.
func TestOpen(t *testing.T) {
	t.Parallel()
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			url := db.url(t)
			p := open(t, sqlconn.Config{URL: url, MaxOpenConns: 2})
			assert.Equal(t, db.name, p.URL.Dialect.String())
			assert.Equal(t, sqlconn.MaskURL(url), p.URL.Masked)
			assert.Equal(t, 2, p.DB.Stats().MaxOpenConnections)
			require.NoError(t, p.DB.PingContext(t.Context()))
		})
	}
}

// TestSQLitePragmas checks what every connection of a SQLite pool sets:
// its busy timeout, and WAL mode, a property of the file seen through a
// second, plain pool.
func TestSQLitePragmas(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.db")
	p := open(t, sqlconn.Config{URL: "sqlite:" + path, BusyTimeout: 1234 * time.Millisecond})
	var busy int64
	require.NoError(t, p.DB.QueryRowContext(t.Context(), `PRAGMA busy_timeout`).Scan(&busy))
	assert.Equal(t, int64(1234), busy)
	var sync int64
	require.NoError(t, p.DB.QueryRowContext(t.Context(), `PRAGMA synchronous`).Scan(&sync))
	assert.Equal(t, int64(1), sync, "synchronous=NORMAL")

	plain, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	defer plain.Close()
	var mode string
	require.NoError(t, plain.QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode))
	assert.Equal(t, "wal", mode, "the pool puts the file in WAL mode")
}

// TestDriverLog: what the MySQL driver logs itself goes to the pool's
// Logger, at Warn, with the logger's attributes.
func TestDriverLog(t *testing.T) {
	var buf strings.Builder
	l := sqlconn.DriverLog(slog.New(slog.NewTextHandler(&buf, nil)).With("node", "n1"))
	l.Print("packets.go:155 ", "write tcp 127.0.0.1:1->127.0.0.1:3306: connection reset by peer\n")
	assert.Contains(t, buf.String(), `level=WARN msg="mysql driver" node=n1 said="packets.go:155 write tcp 127.0.0.1:1->127.0.0.1:3306: connection reset by peer"`)
}

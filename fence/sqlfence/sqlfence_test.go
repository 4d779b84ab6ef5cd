package sqlfence_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/fencetest"
	"github.com/cloudbus-go/cloudbus/fence/sqlfence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// env is a heartbeat store and a fence on fresh tables of one database.
type env struct {
	db  *sql.DB
	d   sqlconn.Dialect
	hb  *sqlstore.Store
	f   *sqlfence.Fence
	log string // the subject's log table, quoted
	ins string
	sel string
}

func open(t *testing.T, url string, maxAge time.Duration) *env { return openTB(t, url, maxAge) }

func openB(b *testing.B, url string) *env { return openTB(b, url, time.Hour) } // nobody beats in a benchmark

func openTB(t testing.TB, url string, maxAge time.Duration) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := sqlconn.Open(sqlconn.Config{URL: url, MaxOpenConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	hb, err := sqlstore.OpenDB(ctx, p.DB, sqlstore.Config{Dialect: p.URL.Dialect, Table: randomName("fencehb_")})
	if err != nil {
		p.Close()
		t.Fatal(err)
	}
	f, err := sqlfence.Open(ctx, p.DB, sqlfence.Config{Dialect: hb.Dialect(), HeartbeatTable: hb.Table(), Table: randomName("fence_"), MaxAge: maxAge})
	if err != nil {
		p.Close()
		t.Fatal(err)
	}
	d := p.URL.Dialect
	e := &env{db: p.DB, d: d, hb: hb, f: f, log: sqlconn.QuoteIdent(d, f.Tables()[0]+"_log")}
	create := "CREATE TABLE " + e.log + " (seq INTEGER PRIMARY KEY AUTOINCREMENT, resource TEXT NOT NULL, value TEXT NOT NULL, token BIGINT NOT NULL)"
	switch d {
	case sqlconn.Postgres:
		create = "CREATE TABLE " + e.log + " (seq BIGSERIAL PRIMARY KEY, resource TEXT NOT NULL, value TEXT NOT NULL, token BIGINT NOT NULL)"
	case sqlconn.MySQL:
		create = "CREATE TABLE " + e.log + " (seq BIGINT AUTO_INCREMENT PRIMARY KEY, resource VARCHAR(64) NOT NULL, value VARCHAR(255) NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB"
	}
	if _, err := p.DB.ExecContext(ctx, create); err != nil {
		p.Close()
		t.Fatal(err)
	}
	e.ins = sqlconn.Rebind(d, "INSERT INTO "+e.log+" (resource, value, token) VALUES (?, ?, ?)")
	e.sel = sqlconn.Rebind(d, "SELECT value, token FROM "+e.log+" WHERE resource = ? ORDER BY seq")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := p.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+e.log); err != nil {
			t.Error(err)
		}
		if err := f.Drop(ctx); err != nil {
			t.Error(err)
		}
		if err := hb.Drop(ctx); err != nil {
			t.Error(err)
		}
		_ = hb.Close()
		_ = p.Close()
	})
	return e
}

func (e *env) Members() heartbeat.Store { return e.hb }

func (e *env) Stats() fence.Stats { return e.f.Stats() }

func (e *env) Append(ctx context.Context, resource string, w fence.Guard, value string, hook func() error) ([]byte, error) {
	return e.f.Do(ctx, w, func(ctx context.Context, tx *sql.Tx, tok fence.Token) ([]byte, error) {
		var herr error
		if hook != nil {
			herr = hook()
		}
		if !w.Claim.IsZero() {
			if err := e.f.Verify(ctx, tx, w.Claim); err != nil {
				return nil, err
			}
		}
		if _, err := tx.ExecContext(ctx, e.ins, resource, value, int64(tok)); err != nil {
			return nil, err
		}
		if herr != nil {
			return nil, herr
		}
		return []byte(value), nil
	})
}

func (e *env) Log(ctx context.Context, resource string) ([]fencetest.Entry, error) {
	rows, err := e.db.QueryContext(ctx, e.sel, resource)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []fencetest.Entry
	for rows.Next() {
		var en fencetest.Entry
		if err := rows.Scan(&en.Value, &en.Token); err != nil {
			return nil, err
		}
		out = append(out, en)
	}
	return out, rows.Err()
}

func suite(t *testing.T, url func(t *testing.T) string) {
	fencetest.Run(t, func(t *testing.T, maxAge time.Duration) fencetest.Subject { return open(t, url(t), maxAge) })
}

func TestConformanceSQLite(t *testing.T) {
	suite(t, func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "fence.db") })
}

func TestConformancePostgres(t *testing.T) {
	suite(t, func(t *testing.T) string { return testenv.PostgresDSN(t) })
}

func TestConformanceMySQL(t *testing.T) {
	suite(t, func(t *testing.T) string { return testenv.MySQLDSN(t) })
}

// TestDatabaseErrorsAreMarked: the fence's own statements fail with
// errors sqlconn.IsDatabaseError recognizes (their text may name the
// database: for logs, not for a remote caller), while fn's own errors
// come back as they are.
func TestDatabaseErrorsAreMarked(t *testing.T) {
	e := open(t, "sqlite:"+filepath.Join(t.TempDir(), "fence.db"), time.Hour)
	ctx := t.Context()
	key := func() fence.Key { return fence.NewKey(message.NewUUID(), "test", []byte("{}")) }

	own := errors.New("the hypervisor is down")
	_, err := e.f.Do(ctx, fence.Guard{Key: key()}, func(context.Context, *sql.Tx, fence.Token) ([]byte, error) { return nil, own })
	require.ErrorIs(t, err, own)
	assert.False(t, sqlconn.IsDatabaseError(err), "fn's error is not the database's: %v", err)

	_, err = e.db.ExecContext(ctx, "DROP TABLE "+sqlconn.QuoteIdent(e.d, e.f.Tables()[1]))
	require.NoError(t, err)
	_, err = e.f.Do(ctx, fence.Guard{Key: key()}, func(context.Context, *sql.Tx, fence.Token) ([]byte, error) { return nil, nil })
	require.Error(t, err)
	assert.True(t, sqlconn.IsDatabaseError(err), "a failed statement of the fence: %v", err)
}

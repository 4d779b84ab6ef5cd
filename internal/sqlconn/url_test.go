package sqlconn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
)

// secret is a password that must appear in no error and no log.
const secret = "Pw-5e1f0c-never-printed"

func TestMaskURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://bob:" + secret + "@db:5432/x?sslmode=disable":       "postgres://bob:xxxxx@db:5432/x?sslmode=disable",
		"postgresql://bob@db/x?password=" + secret + "&sslmode=require": "postgresql://bob@db/x?password=xxxxx&sslmode=require",
		"postgres://db/x":                                       "postgres://db/x",
		"mysql://bob:" + secret + "@db:3306/x":                  "mysql://bob:xxxxx@db:3306/x",
		"bob:" + secret + "@tcp(db:3306)/x?parseTime=true":      "bob:xxxxx@tcp(db:3306)/x?parseTime=true",
		"root@tcp(127.0.0.1:3306)/test":                         "root@tcp(127.0.0.1:3306)/test",
		"host=db user=bob password=" + secret + " dbname=x":     "host=db user=bob password=xxxxx dbname=x",
		"host=db user=bob password='" + secret + " x' dbname=x": "host=db user=bob password=xxxxx dbname=x",
		"sqlite:/var/lib/cloudbus/hb.db":                        "sqlite:/var/lib/cloudbus/hb.db",
		"amqp://bob:" + secret + "@host/":                       "amqp://bob:xxxxx@host/",
		"not a url at all with " + secret:                       "(unparsable URL)",
	} {
		got := sqlconn.MaskURL(in)
		assert.Equal(t, want, got, "MaskURL(%q)", in)
		assert.NotContains(t, got, secret)
	}
}

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		raw     string
		dialect sqlconn.Dialect // given
		want    sqlconn.Dialect // found; Auto: an error
		errText string
	}{
		{"sqlite:/tmp/hb.db", sqlconn.Auto, sqlconn.SQLite, ""},
		{"sqlite:hb.db", sqlconn.Auto, sqlconn.SQLite, ""},
		{"sqlite:///tmp/hb.db", sqlconn.Auto, sqlconn.SQLite, ""},
		{"file:/tmp/hb.db?_pragma=foreign_keys(1)", sqlconn.Auto, sqlconn.SQLite, ""},
		{"postgres://u:" + secret + "@h/db", sqlconn.Auto, sqlconn.Postgres, ""},
		{"postgresql://u@h/db", sqlconn.Auto, sqlconn.Postgres, ""},
		{"host=h password=" + secret, sqlconn.Postgres, sqlconn.Postgres, ""},
		{"mysql://u:" + secret + "@h/db", sqlconn.Auto, sqlconn.MySQL, ""},
		{"u:" + secret + "@tcp(h:3306)/db", sqlconn.Auto, sqlconn.MySQL, ""},
		{"sqlite::memory:", sqlconn.Auto, sqlconn.Auto, "in-memory SQLite"},
		{"file::memory:?cache=shared", sqlconn.Auto, sqlconn.Auto, "in-memory SQLite"},
		{"file:hb.db?mode=memory", sqlconn.Auto, sqlconn.Auto, "in-memory SQLite"},
		{"sqlite://host/hb.db", sqlconn.Auto, sqlconn.Auto, "names a host"},
		{"sqlite:", sqlconn.Auto, sqlconn.Auto, "not a database file"},
		{"ftp://bob:" + secret + "@host/", sqlconn.Auto, sqlconn.Auto, "cannot tell the database of URL ftp://bob:xxxxx@host/"},
		{"redis://u:" + secret + "@host", sqlconn.Auto, sqlconn.Auto, "cannot tell the database"},
		{"mysql://bob:" + secret + "@db:3306/x?timeout=notaduration", sqlconn.Auto, sqlconn.Auto, "not a MySQL URL or DSN"},
		{"bob:" + secret + "@tcp(db:3306)/x?timeout=notaduration", sqlconn.Auto, sqlconn.Auto, "not a MySQL URL or DSN"},
		{"no-equals-sign", sqlconn.Postgres, sqlconn.Auto, "neither a postgres:// URL nor a key=value"},
		{"sqlite:/tmp/hb.db", 9, sqlconn.Auto, "unknown Dialect(9)"},
	} {
		u, err := sqlconn.ParseURL(c.raw, c.dialect)
		if c.want == sqlconn.Auto {
			if assert.Error(t, err, "ParseURL(%q)", c.raw) {
				assert.Contains(t, err.Error(), c.errText)
				assert.NotContains(t, err.Error(), secret, "an error never quotes a password")
				assert.False(t, strings.HasPrefix(err.Error(), "sqlconn"), "callers add their own prefix: %v", err)
			}
			continue
		}
		if assert.NoError(t, err, "ParseURL(%q)", c.raw) {
			assert.Equal(t, c.want, u.Dialect, "ParseURL(%q)", c.raw)
			assert.NotContains(t, u.Masked, secret)
		}
	}
}

// TestScrubAndFail: a driver error quoting the password, plain or
// URL-escaped, or the whole DSN, comes out masked, and the chain still
// holds the driver's error and ctx's.
func TestScrubAndFail(t *testing.T) {
	const odd = "p@ss/w:rd" + secret // escaped in a URL
	u, err := sqlconn.ParseURL("postgres://bob:"+strings.NewReplacer("@", "%40", "/", "%2F", ":", "%3A").Replace(odd)+"@db/x", sqlconn.Auto)
	require.NoError(t, err)
	assert.Equal(t, "postgres://bob:xxxxx@db/x", u.Masked)
	assert.Equal(t, "auth failed for xxxxx", u.Scrub("auth failed for "+odd))

	m, err := sqlconn.ParseURL("bob:"+secret+"@tcp(db:3306)/x", sqlconn.Auto)
	require.NoError(t, err)
	assert.Equal(t, "dial bob:xxxxx@tcp(db:3306)/x: refused", m.Scrub("dial bob:"+secret+"@tcp(db:3306)/x: refused"))

	driverErr := errors.New("password " + secret + " rejected")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err = m.Fail(ctx, "beat node a", driverErr)
	assert.Equal(t, "beat node a on bob:xxxxx@tcp(db:3306)/x: context canceled: password xxxxx rejected", err.Error())
	assert.ErrorIs(t, err, driverErr)
	assert.ErrorIs(t, err, context.Canceled)

	named := sqlconn.URL{Dialect: sqlconn.SQLite, Masked: "sqlite (caller's *sql.DB)"}
	assert.Equal(t, "list on sqlite (caller's *sql.DB): boom", named.Fail(t.Context(), "list", errors.New("boom")).Error())
	assert.True(t, sqlconn.IsDatabaseError(err), "Fail marks its error")
	assert.True(t, sqlconn.IsDatabaseError(fmt.Errorf("wrapped: %w", err)))
}

func TestMark(t *testing.T) {
	assert.NoError(t, sqlconn.Mark(nil))
	assert.False(t, sqlconn.IsDatabaseError(nil))
	driverErr := errors.New("dial tcp 10.0.0.1:5432: connection refused")
	assert.False(t, sqlconn.IsDatabaseError(driverErr))
	marked := sqlconn.Mark(driverErr)
	assert.True(t, sqlconn.IsDatabaseError(marked))
	assert.Equal(t, driverErr.Error(), marked.Error(), "the text is unchanged")
	assert.ErrorIs(t, marked, driverErr, "the driver's error stays in the chain")
	assert.Same(t, marked, sqlconn.Mark(marked), "marking twice wraps once")
	assert.True(t, sqlconn.IsDatabaseError(fmt.Errorf("sqlfence: begin: %w", marked)))
}

func TestDialect(t *testing.T) {
	for d, want := range map[sqlconn.Dialect]string{sqlconn.Auto: "auto", sqlconn.SQLite: "sqlite", sqlconn.Postgres: "postgres", sqlconn.MySQL: "mysql", 42: "Dialect(42)"} {
		assert.Equal(t, want, d.String())
	}
	assert.Equal(t, `"a"."b"`, sqlconn.QuoteIdent(sqlconn.Postgres, "a.b"))
	assert.Equal(t, `"t"`, sqlconn.QuoteIdent(sqlconn.SQLite, "t"))
	assert.Equal(t, "`a`.`b`", sqlconn.QuoteIdent(sqlconn.MySQL, "a.b"))
	q := "UPDATE t SET a = ?, b = ? WHERE c = ?"
	assert.Equal(t, "UPDATE t SET a = $1, b = $2 WHERE c = $3", sqlconn.Rebind(sqlconn.Postgres, q))
	assert.Equal(t, q, sqlconn.Rebind(sqlconn.MySQL, q))
	assert.Equal(t, q, sqlconn.Rebind(sqlconn.SQLite, q))
}

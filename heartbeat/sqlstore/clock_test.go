package sqlstore_test

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
)

// The clock tests skew the database's clock by an hour for the sessions
// of one store ("ahead") and not for the other ("normal"); both share a
// table and run on this machine, with one client clock. If ages came
// from the client, both would see the same ages; they come from the
// database's clock of each session, so "ahead" sees every record an hour
// older, and "normal" sees a record stamped by "ahead" as just beaten
// (its age, negative, is reported as 0).
func checkSkewedClock(t *testing.T, normal, ahead *sqlstore.Store) {
	ctx := t.Context()
	n, m := message.NewUUID(), message.NewUUID()
	en, err := normal.Register(ctx, n)
	require.NoError(t, err)

	byNormal := find(t, normal, n)
	assert.Less(t, byNormal.Age, 5*time.Second, "by the normal clock the record is fresh")
	byAhead := find(t, ahead, n)
	assert.Greater(t, byAhead.Age, 59*time.Minute, "by a database clock an hour ahead, List must report the record an hour old")
	assert.Less(t, byAhead.Age, 61*time.Minute)

	em, err := ahead.Register(ctx, m)
	require.NoError(t, err)
	assert.Greater(t, em, en, "epochs still increase")
	assert.Zero(t, find(t, normal, m).Age, "a record stamped an hour in the future is 0 old, never negative")
	assert.Less(t, find(t, ahead, m).Age, 5*time.Second)

	require.NoError(t, ahead.Beat(ctx, n, en), "Beat stamps the session's database clock")
	assert.Less(t, find(t, ahead, n).Age, 5*time.Second)
	assert.Zero(t, find(t, normal, n).Age)
}

func find(t *testing.T, s heartbeat.Store, node string) heartbeat.Record {
	t.Helper()
	recs, err := s.List(t.Context())
	require.NoError(t, err)
	for _, r := range recs {
		if r.Node == node {
			return r
		}
	}
	t.Fatalf("List does not include %s", node)
	return heartbeat.Record{}
}

// withParam adds key=value to a URL's or DSN's query.
func withParam(dsn, key, value string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + key + "=" + value
}

// TestDatabaseClockMySQL skews the clock with the session variable
// timestamp, which MySQL and MariaDB use for NOW() and UTC_TIMESTAMP():
// go-sql-driver/mysql sets unknown DSN parameters as session variables.
func TestDatabaseClockMySQL(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	normal := openFresh(t, dsn)
	future := time.Now().Add(time.Hour).Unix()
	ahead := open(t, sqlstore.Config{URL: withParam(dsn, "timestamp", strconv.FormatInt(future, 10)), Table: normal.Table()})
	checkSkewedClock(t, normal, ahead)
}

// TestDatabaseClockPostgres skews the clock with a function
// clock_timestamp() in a schema of its own, searched before pg_catalog
// by the "ahead" store's sessions only (search_path).
func TestDatabaseClockPostgres(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDSN(t)
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() }) // after the schema's cleanup below
	schema := randomTable() + "_skew"
	_, err = db.ExecContext(t.Context(), fmt.Sprintf(`CREATE SCHEMA %s`, schema))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		_, err := db.ExecContext(ctx, fmt.Sprintf(`DROP SCHEMA %s CASCADE`, schema))
		assert.NoError(t, err)
	})
	_, err = db.ExecContext(t.Context(), fmt.Sprintf(`CREATE FUNCTION %s.clock_timestamp() RETURNS timestamptz
		LANGUAGE sql AS $$ SELECT pg_catalog.clock_timestamp() + interval '1 hour' $$`, schema))
	require.NoError(t, err)

	table := "public." + randomTable()
	normal, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: dsn, Table: table})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		assert.NoError(t, normal.Drop(ctx))
		assert.NoError(t, normal.Close())
	})
	ahead := open(t, sqlstore.Config{URL: withParam(dsn, "search_path", schema+",pg_catalog,public"), Table: table})
	checkSkewedClock(t, normal, ahead)
}

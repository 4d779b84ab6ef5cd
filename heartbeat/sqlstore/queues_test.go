package sqlstore_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/sqlconn"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
)

// databases are the three dialects' test databases.
var databases = []struct {
	name string
	url  func(testing.TB) string
}{{"sqlite", sqliteURL}, {"postgres", testenv.PostgresDSN}, {"mysql", testenv.MySQLDSN}}

// TestMigrateFromV1 creates tables at schema version 1 with version 1's
// statements and records in them, then opens the store: the tables are
// migrated in place to version 2, the records are kept, and the bus
// status and the queue book work on them. Drop then removes every table.
func TestMigrateFromV1(t *testing.T) {
	t.Parallel()
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			u := db.url(t)
			ctx := t.Context()
			p, err := sqlconn.Open(sqlconn.Config{URL: u})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, p.Close()) }) // after the store's cleanup
			d, table := p.URL.Dialect, randomTable()
			require.NoError(t, sqlstore.CreateV1(ctx, p.DB, d, table))
			dropped := false
			t.Cleanup(func() {
				if dropped {
					return
				}
				ctx, cancel := cleanupCtx()
				defer cancel()
				for _, name := range []string{table + "_queues", table, table + "_meta"} {
					_, err := p.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+sqlconn.QuoteIdent(d, name))
					assert.NoError(t, err)
				}
			})

			// Records as version 1 wrote them.
			now := time.Now().UnixMicro()
			v1 := []heartbeat.Record{{Node: message.NewUUID(), Epoch: now - 2, Seq: 7}, {Node: message.NewUUID(), Epoch: now - 1}}
			for _, r := range v1 {
				_, err := p.DB.ExecContext(ctx, sqlconn.Rebind(d, "INSERT INTO "+sqlconn.QuoteIdent(d, table)+" (node, epoch, seq, beat_us) VALUES (?, ?, ?, ?)"), r.Node, r.Epoch, r.Seq, now)
				require.NoError(t, err)
			}
			_, err = p.DB.ExecContext(ctx, sqlconn.Rebind(d, "UPDATE "+sqlconn.QuoteIdent(d, table+"_meta")+" SET last_epoch = ?"), now-1)
			require.NoError(t, err)

			var logs bytes.Buffer
			var mu sync.Mutex
			logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
			s := open(t, sqlstore.Config{URL: u, Table: table, Logger: logger})
			mu.Lock()
			assert.Contains(t, logs.String(), "schema migrated", "a version 1 table is migrated")
			assert.Contains(t, logs.String(), "from=1 to=2")
			mu.Unlock()
			var version int
			require.NoError(t, p.DB.QueryRowContext(ctx, "SELECT version FROM "+sqlconn.QuoteIdent(d, table+"_meta")+" WHERE id = 1").Scan(&version))
			assert.Equal(t, 2, version)

			recs, err := s.List(ctx)
			require.NoError(t, err)
			require.Len(t, recs, 2, "the migration keeps the records")
			for _, want := range v1 {
				got := find(t, s, want.Node)
				assert.Equal(t, want.Epoch, got.Epoch, "the migration keeps the epoch")
				assert.Equal(t, want.Seq, got.Seq, "the migration keeps the sequence")
				assert.Zero(t, got.BusDown, "a migrated record reports the bus up")
				assert.Less(t, got.Age, time.Minute)
			}
			require.NoError(t, s.Beat(ctx, v1[0].Node, v1[0].Epoch), "a migrated record beats with its epoch")
			assert.Equal(t, int64(8), find(t, s, v1[0].Node).Seq)
			require.NoError(t, s.BeatBus(ctx, v1[1].Node, v1[1].Epoch, false))
			assert.Positive(t, find(t, s, v1[1].Node).BusDown, "the migrated table records the bus status")
			require.NoError(t, s.AddQueues(ctx, v1[0].Node, []string{"q"}))
			qs, err := s.Queues(ctx)
			require.NoError(t, err)
			assert.Equal(t, map[string][]string{v1[0].Node: {"q"}}, qs, "the migration creates the queues table")
			e, err := s.Register(ctx, message.NewUUID())
			require.NoError(t, err)
			assert.Greater(t, e, now-1, "epochs go on from the table's last one")

			mu.Lock()
			logs.Reset()
			mu.Unlock()
			open(t, sqlstore.Config{URL: u, Table: table, Logger: logger})
			mu.Lock()
			assert.NotContains(t, logs.String(), "schema migrated", "a migrated table is current")
			mu.Unlock()

			require.NoError(t, s.Drop(ctx))
			dropped = true
			for _, name := range []string{table + "_queues", table, table + "_meta"} {
				_, err := p.DB.ExecContext(ctx, "SELECT COUNT(*) FROM "+sqlconn.QuoteIdent(d, name))
				assert.Error(t, err, "Drop drops %s", name)
			}
		})
	}
}

// TestQueueNames: AddQueues takes node and queue names of 1 to 255 bytes
// and records nothing of a list with a bad name; RemoveQueues of any
// name is a no-op if it is not recorded.
func TestQueueNames(t *testing.T) {
	t.Parallel()
	s := openFresh(t, sqliteURL(t))
	ctx := t.Context()
	n := message.NewUUID()
	for _, c := range []struct {
		node   string
		queues []string
		want   string
	}{
		{"", []string{"q"}, `node "" must be 1 to 255 bytes`},
		{strings.Repeat("n", 256), []string{"q"}, "must be 1 to 255 bytes"},
		{n, []string{"q", ""}, `queue name "" must be 1 to 255 bytes (nothing was recorded)`},
		{n, []string{"q", strings.Repeat("x", 256)}, "must be 1 to 255 bytes (nothing was recorded)"},
	} {
		err := s.AddQueues(ctx, c.node, c.queues)
		require.Error(t, err)
		assert.Contains(t, err.Error(), c.want)
		assert.True(t, strings.HasPrefix(err.Error(), "sqlstore: "), "errors carry the package prefix: %v", err)
	}
	qs, err := s.Queues(ctx)
	require.NoError(t, err)
	assert.Empty(t, qs, "a list with a bad name records nothing")
	require.NoError(t, s.AddQueues(ctx, strings.Repeat("n", 255), []string{strings.Repeat("x", 255)}), "255 bytes fit")
	require.NoError(t, s.RemoveQueues(ctx, "", []string{"", strings.Repeat("x", 300)}), "removing names never recorded is a no-op")
	require.NoError(t, s.RemoveQueues(ctx, strings.Repeat("n", 255), []string{strings.Repeat("x", 255)}))
	qs, err = s.Queues(ctx)
	require.NoError(t, err)
	assert.Empty(t, qs)
}

// TestQueuesContention runs many writers of a few nodes' queues through
// several pools at once, adding and removing overlapping names in random
// order: no call may fail. PostgreSQL's removals lock their rows in one
// order and every dialect retries a write the database aborted to break
// a deadlock.
func TestQueuesContention(t *testing.T) {
	t.Parallel()
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			u := db.url(t)
			first := openFresh(t, u)
			stores := []*sqlstore.Store{first}
			for range 3 {
				stores = append(stores, open(t, sqlstore.Config{URL: u, Table: first.Table(), MaxOpenConns: 8}))
			}
			ctx := t.Context()
			nodes := []string{message.NewUUID(), message.NewUUID(), message.NewUUID()}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var errs []error
			for g := range 16 {
				wg.Go(func() {
					s := stores[g%len(stores)]
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for range 60 {
						n := nodes[rng.IntN(len(nodes))]
						var qs []string
						for range 1 + rng.IntN(8) {
							qs = append(qs, fmt.Sprintf("q%03d", rng.IntN(40)))
						}
						var err error
						if rng.IntN(2) == 0 {
							err = s.AddQueues(ctx, n, qs)
						} else {
							err = s.RemoveQueues(ctx, n, qs)
						}
						if err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			assert.Empty(t, errs, "concurrent queue writes must not fail")
		})
	}
}

// TestQueueErrorsMaskPassword makes the queue book's statements fail on
// PostgreSQL, through a URL with a password (the test server trusts the
// client, so the password is ignored): each error names the operation
// and the database masked, and holds no password.
func TestQueueErrorsMaskPassword(t *testing.T) {
	t.Parallel()
	pu, err := url.Parse(testenv.PostgresDSN(t))
	require.NoError(t, err)
	pu.User = url.UserPassword(pu.User.Username(), secret)
	s := openFresh(t, pu.String())
	ctx := t.Context()
	_, err = s.List(ctx)
	require.NoError(t, err, "the server must trust the client for this test")
	other := open(t, sqlstore.Config{URL: testenv.PostgresDSN(t), Table: s.Table()})
	// Another node drops the tables behind the store's back.
	require.NoError(t, other.Drop(ctx))
	n := message.NewUUID()
	masked := " on " + s.MaskedURL() + ": "
	for op, err := range map[string]error{
		"add queues of node " + n:                s.AddQueues(ctx, n, []string{"q"}),
		"remove queues of node " + n:             s.RemoveQueues(ctx, n, []string{"q"}),
		"list queues":                            func() error { _, err := s.Queues(ctx); return err }(),
		"beat node " + n + " epoch 1 (bus down)": s.BeatBus(ctx, n, 1, false),
	} {
		require.Error(t, err, op)
		assert.Contains(t, err.Error(), "sqlstore: "+op+masked, "the error says what failed, where")
		assert.NotContains(t, err.Error(), secret, "an error leaked the password")
	}
}

// TestBusDownResolution: BusDown comes from the database's clock in the
// List statement, at least a microsecond while the bus is down.
func TestBusDownResolution(t *testing.T) {
	t.Parallel()
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			s := openFresh(t, db.url(t))
			ctx := t.Context()
			n := message.NewUUID()
			e, err := s.Register(ctx, n)
			require.NoError(t, err)
			require.NoError(t, s.BeatBus(ctx, n, e, false))
			r := find(t, s, n)
			assert.GreaterOrEqual(t, r.BusDown, time.Microsecond, "BusDown is at least a microsecond while the bus is down, even at once")
			assert.Contains(t, s.ListSQL(), "bus_down_us", "BusDown is computed by the database")
			time.Sleep(20 * time.Millisecond)
			r = find(t, s, n)
			assert.GreaterOrEqual(t, r.BusDown, 15*time.Millisecond)
			assert.Less(t, r.BusDown, 5*time.Second)
			assert.Equal(t, r.Age, r.BusDown, "the first down beat stamps the outage with the beat's own instant, and List reads one clock")
		})
	}
}

// TestMetaRowLostMigratesAgain deletes the meta row of version 2 tables:
// reopening runs every migration again from version 0, which must not
// fail on what is already there, and keeps the records and the queues
// (PostgreSQL and MySQL keep the bus status too; SQLite rebuilds the
// table, and outages restart at the next down beat). Tables qualified by
// their schema or database are migrated too.
func TestMetaRowLostMigratesAgain(t *testing.T) {
	t.Parallel()
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			u := db.url(t)
			ctx := t.Context()
			p, err := sqlconn.Open(sqlconn.Config{URL: u})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, p.Close()) })
			d := p.URL.Dialect
			schema := map[sqlconn.Dialect]string{sqlconn.SQLite: "main", sqlconn.Postgres: "public"}[d]
			if d == sqlconn.MySQL {
				require.NoError(t, p.DB.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&schema))
			}
			for _, table := range []string{randomTable(), schema + "." + randomTable()} {
				cfg := sqlstore.Config{URL: u, Table: table}
				s, err := sqlstore.Open(ctx, cfg)
				require.NoError(t, err, "open %s", table)
				t.Cleanup(func() {
					ctx, cancel := cleanupCtx()
					defer cancel()
					assert.NoError(t, s.Drop(ctx))
					assert.NoError(t, s.Close())
				})
				n := message.NewUUID()
				e, err := s.Register(ctx, n)
				require.NoError(t, err)
				require.NoError(t, s.BeatBus(ctx, n, e, false))
				require.NoError(t, s.AddQueues(ctx, n, []string{"q"}))

				_, err = p.DB.ExecContext(ctx, "DELETE FROM "+sqlconn.QuoteIdent(d, table+"_meta"))
				require.NoError(t, err)
				again := open(t, cfg)
				r := find(t, again, n)
				assert.Equal(t, e, r.Epoch, "migrating again keeps the records")
				assert.Equal(t, int64(1), r.Seq)
				if d != sqlconn.SQLite {
					assert.Positive(t, r.BusDown, "migrating again keeps the bus status")
				}
				qs, err := again.Queues(ctx)
				require.NoError(t, err)
				assert.Equal(t, map[string][]string{n: {"q"}}, qs, "migrating again keeps the queues")
				require.NoError(t, again.BeatBus(ctx, n, e, false))
				assert.Positive(t, find(t, again, n).BusDown)
				e2, err := again.Register(ctx, n)
				require.NoError(t, err)
				assert.Greater(t, e2, e)
			}
		})
	}
}

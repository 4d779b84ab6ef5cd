package sqlstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
)

// TestConcurrentOpen opens several stores on a new table at once, as
// nodes starting together do: the schema lock makes exactly one create
// the tables, and none fails.
func TestConcurrentOpen(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", sqliteURL}, {"postgres", testenv.PostgresDSN}, {"mysql", testenv.MySQLDSN}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := c.url(t)
			table := randomTable()
			const n = 4
			stores := make([]*sqlstore.Store, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					stores[i], errs[i] = sqlstore.Open(t.Context(), sqlstore.Config{URL: url, Table: table, MaxOpenConns: 1})
				})
			}
			wg.Wait()
			t.Cleanup(func() {
				ctx, cancel := cleanupCtx()
				defer cancel()
				for _, s := range stores {
					if s != nil {
						assert.NoError(t, s.Drop(ctx))
						assert.NoError(t, s.Close())
					}
				}
			})
			for i, err := range errs {
				require.NoError(t, err, "concurrent Open %d", i)
			}
			node := message.NewUUID()
			e, err := stores[0].Register(t.Context(), node)
			require.NoError(t, err)
			require.NoError(t, stores[n-1].Beat(t.Context(), node, e), "every store sees the same table")
		})
	}
}

// TestMonitorsOnSQLite runs the heartbeat protocol on one SQLite file
// with a store per node, as processes would: a node that stops beating
// without a goodbye is evicted by exactly one peer, and the other
// reports it Left.
func TestMonitorsOnSQLite(t *testing.T) {
	t.Parallel()
	url := sqliteURL(t)
	table := randomTable()
	cfg := heartbeat.Config{Interval: 50 * time.Millisecond, EvictAfter: 300 * time.Millisecond, OpTimeout: time.Second}
	var nodes []*monNode
	for range 3 {
		n := &monNode{id: message.NewUUID(), events: make(chan heartbeat.Event, 64), done: make(chan error, 1)}
		s := open(t, sqlstore.Config{URL: url, Table: table})
		m, err := heartbeat.NewMonitor(s, n.id, cfg, heartbeat.ListenerFunc(func(e heartbeat.Event) { n.events <- e }), nil)
		require.NoError(t, err)
		n.m = m
		_, _, err = m.Join(t.Context())
		require.NoError(t, err)
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		n.run(t)
	}
	// The third node crashes: its loop stops, no goodbye.
	dead := nodes[2]
	dead.cancel()
	require.NoError(t, <-dead.done)

	kinds, _ := awaitGone(t, nodes[:2], dead.id)
	assert.Equal(t, 1, kinds[heartbeat.Evicted], "exactly one peer evicts the dead node")
	assert.Equal(t, 1, kinds[heartbeat.Left], "the other reports it Left")
	for _, n := range nodes[:2] {
		n.cancel()
		require.NoError(t, <-n.done)
		require.NoError(t, n.m.Leave(context.Background()))
	}
}

// TestMonitorsEvictADeadSessionFast runs monitors with session locks on
// each database, a store (a pool) per node as processes would have: a
// node whose loop stops and whose pool closes, as a killed process's
// sockets do, is evicted once its beat is a quarter Interval late, long
// before EvictAfter; the figure is logged.
func TestMonitorsEvictADeadSessionFast(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", sqliteURL}, {"postgres", testenv.PostgresDSN}, {"mysql", testenv.MySQLDSN}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := c.url(t)
			table := randomTable()
			cfg := heartbeat.Config{Interval: 100 * time.Millisecond, EvictAfter: 3 * time.Second, OpTimeout: time.Second, SessionLocks: true}
			var nodes []*monNode
			for i := range 3 {
				n := &monNode{id: message.NewUUID(), events: make(chan heartbeat.Event, 64), done: make(chan error, 1)}
				if i == 0 {
					n.s = open(t, sqlstore.Config{URL: url, Table: table})
					t.Cleanup(func() { // runs before open's Close
						ctx, cancel := cleanupCtx()
						defer cancel()
						assert.NoError(t, n.s.Drop(ctx), "drop table %s", table)
					})
				} else {
					// Closed by hand: the third one is "killed".
					s, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: url, Table: table})
					require.NoError(t, err)
					n.s = s
				}
				m, err := heartbeat.NewMonitor(n.s, n.id, cfg, heartbeat.ListenerFunc(func(e heartbeat.Event) { n.events <- e }), nil)
				require.NoError(t, err)
				n.m = m
				_, _, err = m.Join(t.Context())
				require.NoError(t, err)
				nodes = append(nodes, n)
			}
			for _, n := range nodes {
				n.run(t)
			}
			// Every node learns that the others hold their locks: a round
			// after its own third healthy one.
			time.Sleep(6 * cfg.Interval)

			dead := nodes[2]
			dead.cancel()
			require.NoError(t, <-dead.done)
			last := dead.m.LastBeat()
			require.NoError(t, dead.s.Close()) // its sessions end, as a killed process's do

			kinds, evictedAt := awaitGone(t, nodes[:2], dead.id)
			assert.Equal(t, 1, kinds[heartbeat.Evicted], "exactly one peer evicts the dead node")
			took := evictedAt.Sub(last)
			t.Logf("%s: evicted %s after its last beat (Interval %s, EvictAfter %s)", c.name, took.Round(time.Millisecond), cfg.Interval, cfg.EvictAfter)
			assert.Less(t, took, cfg.EvictAfter/2, "a dead session's node is evicted long before EvictAfter")
			for _, n := range nodes[:2] {
				n.cancel()
				require.NoError(t, <-n.done)
				require.NoError(t, n.m.Leave(context.Background()))
			}
			// The first store's cleanup drops the table; the second's pool closes here.
			require.NoError(t, nodes[1].s.Close())
		})
	}
}

// monNode is a monitor run by a test, with the events it reported.
type monNode struct {
	id     string
	s      *sqlstore.Store // when the test closes it by hand
	m      *heartbeat.Monitor
	events chan heartbeat.Event
	cancel context.CancelFunc
	done   chan error
}

// run runs n's monitor until n.cancel.
func (n *monNode) run(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	n.cancel = cancel
	go func() { n.done <- n.m.Run(ctx) }()
}

// awaitGone waits, up to 10 s, until each of nodes reported dead Evicted
// or Left, and returns how many reported each, and when the eviction was
// reported.
func awaitGone(t *testing.T, nodes []*monNode, dead string) (map[heartbeat.EventKind]int, time.Time) {
	t.Helper()
	var evictedAt time.Time
	kinds := make(map[heartbeat.EventKind]int)
	deadline := time.After(10 * time.Second)
	for _, n := range nodes {
		for waiting := true; waiting; {
			select {
			case e := <-n.events:
				if e.Record.Node == dead && (e.Kind == heartbeat.Evicted || e.Kind == heartbeat.Left) {
					kinds[e.Kind]++
					if e.Kind == heartbeat.Evicted {
						evictedAt = time.Now()
					}
					waiting = false
				}
			case <-deadline:
				t.Fatalf("the dead node was not reported gone within 10 s; so far %v", kinds)
			}
		}
	}
	return kinds, evictedAt
}

package service_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDatabaseCutEvictsNobody cuts the database of a 3-node cluster for
// three eviction thresholds through a proxy the test owns: every node
// fences itself (refuses resource messages) before the threshold at which
// a peer could evict it, nobody is evicted during the cut or in the first
// interval after it heals, and service resumes.
func TestDatabaseCutEvictsNobody(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	px, proxied := proxy.NewURL(t, dsn)
	table := fmt.Sprintf("cloudbus_test_cut_%s", message.NewUUID()[:12])
	// Fast, but not so fast that a database reconnect on a loaded CI
	// machine (the race detector, parallel packages) takes more than the
	// two intervals rule 4 of package heartbeat guarantees after an outage:
	// with 200 ms intervals (and store calls), one node's reconnects kept
	// timing out for a second after the heal in one CI run, and a peer
	// evicted it.
	hb := heartbeat.Config{Interval: 300 * time.Millisecond, Lease: 1200 * time.Millisecond, EvictAfter: 1800 * time.Millisecond, OpTimeout: 300 * time.Millisecond}
	ctx := t.Context()

	direct, err := sqlstore.Open(ctx, sqlstore.Config{URL: dsn, Table: table, MaxOpenConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = direct.Close()
		cleanup, err := sqlstore.Open(context.Background(), sqlstore.Config{URL: dsn, Table: table, MaxOpenConns: 1})
		if err == nil {
			dropTables(t, cleanup, table)
		}
	})

	reg := registry()
	net := membus.New()
	j := newJournal()
	var mu sync.Mutex
	var left []string // ring changes that dropped a node, anywhere
	var nodes []*service.Node
	for range 3 {
		id := message.NewUUID()
		store, err := sqlstore.Open(ctx, sqlstore.Config{URL: proxied, Table: table, MaxOpenConns: 2})
		require.NoError(t, err)
		tr := net.Transport(id)
		rec := newRecorder(j)
		rec.setOnRing(func(n *service.Node, ch service.RingChange) {
			mu.Lock()
			left = append(left, ch.Left...)
			mu.Unlock()
		})
		n, err := service.NewNode(service.Config{Node: id, Prefix: "cut", Transport: tr, Store: store, Registry: reg,
			Heartbeat: hb, Services: []service.Service{rec}, Logger: testLogger(t)})
		require.NoError(t, err)
		require.NoError(t, n.Start(ctx))
		t.Cleanup(func() {
			_ = n.Close()
			_ = tr.Close()
			_ = store.Close()
		})
		nodes = append(nodes, n)
	}
	waitFor(t, 5*time.Second, "every ring holds the 3 nodes", func() bool {
		for _, n := range nodes {
			if len(n.Members()) != 3 {
				return false
			}
		}
		return true
	})

	// A resource owned by each node, to probe whether it serves.
	owned := map[string]string{}
	for len(owned) < 3 {
		res := message.NewUUID()
		if o, _ := nodes[0].Owner(res); owned[o] == "" {
			owned[o] = res
		}
	}
	probe := func(n *service.Node) error {
		res := owned[n.UUID()]
		_, err := bus.Call[any](ctx, n.Bus(), n.Bus().LocalID("recorder"), Touch{Resource: res}, bus.WithResource(res), bus.WithTimeout(time.Second))
		return err
	}
	for _, n := range nodes {
		require.NoError(t, probe(n))
	}

	cut := time.Now()
	px.Cut()
	fencedAt := map[string]time.Duration{}
	waitFor(t, hb.EvictAfter, "every node fences itself before the eviction threshold", func() bool {
		for _, n := range nodes {
			if _, ok := fencedAt[n.UUID()]; !ok && n.LeaseExpired() {
				fencedAt[n.UUID()] = time.Since(cut)
			}
		}
		return len(fencedAt) == 3
	})
	for _, n := range nodes {
		err := probe(n)
		assert.ErrorIs(t, err, message.ErrNotOwner, "a fenced node refuses resource messages")
		t.Logf("node %s fenced %s after the cut (lease %s, peers could evict after %s)", n.UUID()[:8], fencedAt[n.UUID()].Round(time.Millisecond), hb.Lease, hb.EvictAfter)
		assert.Less(t, fencedAt[n.UUID()], hb.EvictAfter)
	}

	time.Sleep(3*hb.EvictAfter - time.Since(cut)) // the cut lasts three thresholds
	px.Heal()
	healed := time.Now()
	waitFor(t, 10*time.Second, "every node serves again", func() bool {
		for _, n := range nodes {
			if n.LeaseExpired() || probe(n) != nil {
				return false
			}
		}
		return true
	})
	t.Logf("service resumed %s after the database came back", time.Since(healed).Round(time.Millisecond))
	for time.Since(healed) < 3*hb.Interval { // the first interval after the heal, and more
		time.Sleep(hb.Interval / 2)
	}
	mu.Lock()
	assert.Empty(t, left, "no node left any ring: nobody was evicted")
	mu.Unlock()
	recs, err := direct.List(ctx)
	require.NoError(t, err)
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.Node)
	}
	for _, n := range nodes {
		assert.Contains(t, ids, n.UUID(), "every record survived the cut")
		assert.Equal(t, service.StateServing, n.State())
		assert.Len(t, n.Members(), 3)
	}
}

// dropTables drops the test's tables.
func dropTables(t *testing.T, s *sqlstore.Store, table string) {
	t.Helper()
	defer s.Close()
	if err := s.Drop(context.Background()); err != nil {
		t.Errorf("cleanup: drop %s: %v", table, err)
	}
}

// waitFor polls cond every 10 ms for at most d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testLogger logs warnings and errors through t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

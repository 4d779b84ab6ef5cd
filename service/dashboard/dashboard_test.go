package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/dashboard"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Ping is a message about a resource; Pong says where it ran.
type Ping struct{ Key string }

func (p Ping) ResourceUUID() string { return p.Key }

type Pong struct{ Node string }

func registry() *message.Registry {
	reg := message.NewRegistry()
	message.MustRegister[Ping](reg, "dashtest.v1.Ping")
	message.MustRegister[Pong](reg, "dashtest.v1.Pong")
	return reg
}

// testCluster is n nodes on the in-memory bus and heartbeat store.
type testCluster struct {
	net   *membus.Network
	store *memstore.Store
	nodes []*service.Node
}

func startCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	ctx := t.Context()
	c := &testCluster{net: membus.New(), store: memstore.New(memstore.Config{})}
	hb := heartbeat.TestConfig()
	hb.EvictAfter, hb.Lease = time.Second, 0 // a stall on a loaded machine evicts nobody; a kill within a second
	for range n {
		id := message.NewUUID()
		mux := bus.NewMux()
		bus.Handle(mux, func(ctx context.Context, r *bus.Request, p Ping) (Pong, error) { return Pong{Node: r.Node()}, nil })
		node, err := service.StartNode(ctx, service.Config{Node: id, Transport: c.net.Transport(id), OwnTransport: true,
			Store: c.store.For(id), Registry: registry(), Heartbeat: hb, Services: []service.Service{service.Named("ping", mux)}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = node.Close() })
		c.nodes = append(c.nodes, node)
	}
	for _, node := range c.nodes {
		require.NoError(t, node.AwaitMembers(ctx, n))
	}
	return c
}

func snapshot(t *testing.T, srv *httptest.Server) dashboard.Snapshot {
	t.Helper()
	resp, err := http.Get(srv.URL + "/dashboard.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var s dashboard.Snapshot
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	return s
}

func TestDashboard(t *testing.T) {
	c := startCluster(t, 3)
	ctx := t.Context()
	var takeovers atomic.Uint64
	d, err := dashboard.New(dashboard.Config{Node: c.nodes[0], Interval: 100 * time.Millisecond,
		Resources: func(ctx context.Context, _ *service.Node) (map[string]map[string]int, error) {
			return map[string]map[string]int{"vms": {c.nodes[0].UUID(): 7}}, nil
		},
		Gauges:   func(ctx context.Context) (map[string]int64, error) { return map[string]int64{"jobs in flight": 2}, nil },
		Counters: func() map[string]uint64 { return map[string]uint64{"takeovers": takeovers.Load()} },
	})
	require.NoError(t, err)
	defer d.Close()
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()

	// Traffic, so the handled counts and rates move.
	for range 20 {
		_, err := service.Call[Pong](ctx, c.nodes[1], Ping{Key: message.NewUUID()})
		require.NoError(t, err)
	}

	// The node's view of the heartbeat store lags its ring by up to an
	// interval (a join is broadcast): wait for every record.
	var s dashboard.Snapshot
	require.Eventually(t, func() bool {
		s = snapshot(t, srv)
		for _, m := range s.Members {
			if m.Epoch == 0 {
				return false
			}
		}
		return len(s.Members) == 3
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, c.nodes[0].UUID(), s.Node)
	assert.True(t, s.Agreed, s.Disagreement)
	assert.Equal(t, "serving", s.State)
	require.Len(t, s.Members, 3)
	var share float64
	var handled uint64
	for _, m := range s.Members {
		assert.Equal(t, "healthy", m.Health, "%+v", m)
		assert.Equal(t, "serving", m.State)
		assert.Equal(t, s.Fingerprint, m.Fingerprint)
		assert.Positive(t, m.Epoch)
		assert.WithinDuration(t, time.Now(), m.RegisteredAt, time.Minute)
		assert.GreaterOrEqual(t, m.HeartbeatAgeMS, int64(0))
		assert.Equal(t, m.Node == c.nodes[0].UUID(), m.Self)
		share += m.Share
		handled += m.Handled
	}
	assert.InDelta(t, 1, share, 1e-9, "the shares cover the key space")
	assert.GreaterOrEqual(t, handled, uint64(20), "the pings were handled")
	assert.Equal(t, map[string]int64{"jobs in flight": 2}, s.Gauges)
	self := s.Members[slicesIndex(s.Members, c.nodes[0].UUID())]
	assert.Equal(t, map[string]int{"vms": 7}, self.Resources)

	// The page, and the same data by content negotiation.
	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	assert.Contains(t, string(body), "<title>cloudbus node</title>")
	assert.NotContains(t, string(body), "https://", "no CDN: the page is self-contained")
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	req.Header.Set("Accept", "application/json")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	var viaRoot dashboard.Snapshot
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&viaRoot))
	resp.Body.Close()
	assert.Equal(t, c.nodes[0].UUID(), viaRoot.Node)
	resp, err = http.Get(srv.URL + "/nothing")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)

	// The owner lookup agrees with every node's ring.
	key := message.NewUUID()
	want, err := c.nodes[2].Owner(key)
	require.NoError(t, err)
	resp, err = http.Get(srv.URL + "/dashboard/owner?key=" + strings.ToUpper(key))
	require.NoError(t, err)
	var ans dashboard.OwnerAnswer
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ans))
	resp.Body.Close()
	assert.Equal(t, key, ans.Key, "the key in canonical form")
	assert.Equal(t, want, ans.Owner)
	assert.True(t, ans.Agreed)
	require.Len(t, ans.Answers, 3)
	for _, a := range ans.Answers {
		assert.Equal(t, want, a.Owner, "node %s", a.Node)
	}
	for _, bad := range []string{"", "not-a-uuid", strings.Repeat("a", 300)} {
		resp, err = http.Get(srv.URL + "/dashboard/owner?key=" + bad)
		require.NoError(t, err)
		var e map[string]string
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "key %q", bad)
		assert.NotEmpty(t, e["error"])
	}

	// Live updates: a kill shows as the node's leaving, in the events
	// and the members, on the server-sent events.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ = http.NewRequestWithContext(sctx, "GET", srv.URL+"/dashboard/events", nil)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	events := sse(sctx, resp.Body)
	first, ok := <-events
	require.True(t, ok)
	require.Len(t, first.Members, 3)

	dead := c.nodes[2].UUID()
	c.net.Kill(dead)
	c.store.SetUnreachable(dead, true)
	takeovers.Add(2)
	killed := time.Now()
	var last dashboard.Snapshot
	for s := range events {
		last = s
		if len(s.Members) == 2 && s.Agreed && hasEvent(s, dead, "evicted") && hasCounter(s) {
			break
		}
	}
	require.Len(t, last.Members, 2, "the killed node left: %+v", last)
	assert.True(t, last.Agreed, last.Disagreement)
	assert.True(t, hasEvent(last, dead, "evicted"), "its eviction is among the events: %+v", last.Events)
	assert.True(t, hasCounter(last), "the takeovers are among the events: %+v", last.Events)
	t.Logf("the page showed the kill %s after it (eviction after %s)", time.Since(killed).Round(time.Millisecond), time.Second)

	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "Close is idempotent")
}

func slicesIndex(ms []dashboard.Member, node string) int {
	for i, m := range ms {
		if m.Node == node {
			return i
		}
	}
	return -1
}

func hasEvent(s dashboard.Snapshot, node, kind string) bool {
	for _, e := range s.Events {
		if e.Node == node && e.Kind == kind {
			return true
		}
	}
	return false
}

func hasCounter(s dashboard.Snapshot) bool {
	for _, e := range s.Events {
		if e.Kind == "counter" && strings.HasPrefix(e.Detail, "takeovers +2") {
			return true
		}
	}
	return false
}

// sse decodes the snapshots of a server-sent event stream until it ends
// or ctx does.
func sse(ctx context.Context, r io.Reader) <-chan dashboard.Snapshot {
	out := make(chan dashboard.Snapshot)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var s dashboard.Snapshot
			if json.Unmarshal([]byte(data), &s) != nil {
				continue
			}
			select {
			case out <- s:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// TestLeftOrEvicted: a node that leaves in order is shown "left", one
// that dies "evicted", though another node's monitor may have evicted it.
func TestLeftOrEvicted(t *testing.T) {
	c := startCluster(t, 4)
	d, err := dashboard.New(dashboard.Config{Node: c.nodes[0], Interval: 50 * time.Millisecond})
	require.NoError(t, err)
	defer d.Close()

	// shown waits until the dashboard shows node's departure, and says
	// how.
	shown := func(node string) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s := d.Snapshot(t.Context())
			for _, e := range s.Events {
				if e.Node == node && (e.Kind == "left" || e.Kind == "evicted") {
					return e.Kind
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s's departure not shown within 10s: %+v", node, s.Events)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	leaver, dead := c.nodes[3].UUID(), c.nodes[2].UUID()
	require.NoError(t, c.nodes[3].Close())
	assert.Equal(t, "left", shown(leaver), "a node that left in order")

	c.net.Kill(dead)
	c.store.SetUnreachable(dead, true)
	assert.Equal(t, "evicted", shown(dead), "a node that died, whichever node evicted it")
}

func TestNewRequiresANode(t *testing.T) {
	_, err := dashboard.New(dashboard.Config{})
	assert.ErrorIs(t, err, dashboard.ErrNoNode)
}

// TestShutdownEndsLiveUpdates: a server's Shutdown, with Close
// registered, ends an open stream of live updates at once.
func TestShutdownEndsLiveUpdates(t *testing.T) {
	c := startCluster(t, 1)
	d, err := dashboard.New(dashboard.Config{Node: c.nodes[0]})
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(d.Handler())
	srv.Config.RegisterOnShutdown(func() { _ = d.Close() })
	srv.Start()
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/dashboard/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	_, ok := <-sse(t.Context(), resp.Body)
	require.True(t, ok, "a first snapshot")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, srv.Config.Shutdown(ctx))
	assert.Less(t, time.Since(start), 2*time.Second, "Shutdown did not wait for the stream")
}

// TestViewersShareASnapshot: viewers asking at once share one snapshot
// (one round of ring queries), not one each.
func TestViewersShareASnapshot(t *testing.T) {
	c := startCluster(t, 3)
	d, err := dashboard.New(dashboard.Config{Node: c.nodes[0], Interval: time.Hour})
	require.NoError(t, err)
	defer d.Close()
	before := dashboard.Builds()
	const viewers = 20
	var wg sync.WaitGroup
	snaps := make(chan *dashboard.Snapshot, viewers)
	for range viewers {
		wg.Go(func() { snaps <- d.Snapshot(t.Context()) })
	}
	wg.Wait()
	close(snaps)
	for s := range snaps {
		require.NotNil(t, s)
		assert.Len(t, s.Members, 3)
	}
	assert.Equal(t, uint64(1), dashboard.Builds()-before, "%d viewers at once, one snapshot", viewers)
}

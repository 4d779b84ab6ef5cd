package metrics_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/metrics"
)

// refusing handles StartVm like vmMux, but refuses each VM of refuse
// once with not_owner, as a handler whose fence found its claim stale
// does; handled counts the runs by VM.
type refusing struct {
	mu      sync.Mutex
	refuse  map[string]bool
	handled map[string]int
}

func (h *refusing) mux() *bus.Mux {
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, r *bus.Request, m StartVm) (Started, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.handled[m.VM]++
		if h.refuse[m.VM] {
			delete(h.refuse, m.VM)
			return Started{}, message.ErrNotOwner.WithDetails("refused once by the test")
		}
		return Started{Node: r.Node()}, nil
	})
	return mux
}

func (h *refusing) runs(vm string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.handled[vm]
}

// routingCluster starts n nodes on the in-memory bus, each observed by
// its own Metrics, and a client; it closes them at the test's end.
func routingCluster(t *testing.T, n int, h *refusing) ([]*service.Node, []*metrics.Metrics, *service.Client) {
	t.Helper()
	ctx := t.Context()
	net, store, reg := membus.New(), memstore.New(memstore.Config{}), registry()
	// Fast beats, so the nodes meet at once, but a long eviction: the
	// test counts re-routes exactly, and a node stalled past
	// TestConfig's 300 ms on a loaded machine would be evicted and
	// refuse with not_owner once more.
	steady := heartbeat.TestConfig()
	steady.EvictAfter, steady.Lease = 30*time.Second, 0
	var nodes []*service.Node
	var ms []*metrics.Metrics
	for range n {
		id := message.NewUUID()
		tr := net.Transport(id)
		m, err := metrics.New(metrics.Config{Transport: tr})
		require.NoError(t, err)
		node, err := service.StartNode(ctx, service.Config{Node: id, Transport: tr, OwnTransport: true,
			Store: store.For(id), Registry: reg, Heartbeat: steady, Observer: m,
			Services: []service.Service{service.API(service1, h.mux())}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = node.Close() })
		m.SetNode(node)
		nodes = append(nodes, node)
		ms = append(ms, m)
	}
	for _, node := range nodes {
		require.NoError(t, node.AwaitMembers(ctx, n))
	}
	c, err := service.NewClient(ctx, service.ClientConfig{Transport: net.Transport(message.NewUUID()), OwnTransport: true, Registry: registry()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return nodes, ms, c
}

// sum adds family name's values across the nodes' scrapes, for the
// series whose labels include want (absent series add nothing).
func sum(t *testing.T, ms []*metrics.Metrics, name string, want map[string]string) float64 {
	t.Helper()
	var total float64
	for _, m := range ms {
		f := scrape(t, m)[name]
	next:
		for _, mm := range f.GetMetric() {
			got := labels(mm)
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			total += value(mm)
		}
	}
	return total
}

// TestPortalForwards counts the API portal's forwards of a client's calls
// and a one-way message forwarded to its owner.
func TestPortalForwards(t *testing.T) {
	h := &refusing{refuse: map[string]bool{}, handled: map[string]int{}}
	nodes, ms, c := routingCluster(t, 2, h)
	ctx := t.Context()
	for range 10 {
		_, err := service.Call[Started](ctx, c, StartVm{VM: message.NewUUID()})
		require.NoError(t, err)
	}
	fwd := map[string]string{"service": service1, "type": startType}
	assert.InDelta(t, 10, sum(t, ms, "cloudbus_forwards_total", fwd), 0, "each portal forward counted once, on the portal's node")
	assert.InDelta(t, 0, sum(t, ms, "cloudbus_reroutes_total", nil), 0, "nothing re-routed")

	// A one-way message sent to the queue of a node that does not own
	// its VM: that node forwards it to the owner.
	var vm string
	for vm == "" {
		if v := message.NewUUID(); must(nodes[0].Owner(v)) == nodes[1].UUID() {
			vm = v
		}
	}
	before := sum(t, ms[:1], "cloudbus_forwards_total", fwd)
	require.NoError(t, nodes[0].Bus().Send(ctx, bus.ServiceID(service1, nodes[0].UUID()), StartVm{VM: vm}))
	require.Eventually(t, func() bool { return h.runs(vm) == 1 }, 10*time.Second, 5*time.Millisecond, "the forwarded message ran on its owner")
	assert.InDelta(t, before+1, sum(t, ms[:1], "cloudbus_forwards_total", fwd), 0, "the forward counted on the node that forwarded it")
	assert.InDelta(t, 2, sum(t, ms[:1], "cloudbus_messages_total", map[string]string{"op": "send", "service": service1, "type": startType}), 0,
		"the send, and its forward as a send")
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// TestReroutes counts the re-route of a call refused with not_owner, from
// a node and through the portal.
func TestReroutes(t *testing.T) {
	a, b := message.NewUUID(), message.NewUUID()
	h := &refusing{refuse: map[string]bool{a: true, b: true}, handled: map[string]int{}}
	nodes, ms, c := routingCluster(t, 2, h)
	ctx := t.Context()
	_, err := service.Call[Started](ctx, nodes[0], StartVm{VM: a})
	require.NoError(t, err)
	assert.Equal(t, 2, h.runs(a), "refused once, then run")
	rr := map[string]string{"service": service1, "type": startType, "code": string(message.ErrNotOwner.Code)}
	assert.InDelta(t, 1, sum(t, ms[:1], "cloudbus_reroutes_total", rr), 0, "the caller's re-route counted with the refusal's code")

	_, err = service.Call[Started](ctx, c, StartVm{VM: b})
	require.NoError(t, err)
	assert.InDelta(t, 2, sum(t, ms, "cloudbus_reroutes_total", rr), 0, "the portal's re-route counted on the portal's node")
	assert.InDelta(t, 2, sum(t, ms, "cloudbus_forwards_total", map[string]string{"service": service1, "type": startType}), 0,
		"each attempt of the portal's forward counts")
}

// fakeFence counts what the test says.
type fakeFence struct{ s fence.Stats }

func (f *fakeFence) Stats() fence.Stats { return f.s }

func TestFenceStats(t *testing.T) {
	f := &fakeFence{s: fence.Stats{Runs: 7, Repeats: 2, Stale: 1}}
	m, err := metrics.New(metrics.Config{Fence: f})
	require.NoError(t, err)
	fams := scrape(t, m)
	assert.InDelta(t, 7, value(find(fams, "cloudbus_fence_runs_total", nil)), 0)
	assert.InDelta(t, 2, value(find(fams, "cloudbus_fence_repeats_total", nil)), 0)
	assert.InDelta(t, 1, value(find(fams, "cloudbus_fence_stale_total", nil)), 0)
	f.s.Stale = 3
	assert.InDelta(t, 3, value(find(scrape(t, m), "cloudbus_fence_stale_total", nil)), 0, "read at each scrape")

	// No fence, or a nil one: no fence families.
	var none *fakeFence
	for _, cfg := range []metrics.Config{{}, {Fence: none}} {
		m, err := metrics.New(cfg)
		require.NoError(t, err)
		assert.NotContains(t, scrape(t, m), "cloudbus_fence_runs_total")
	}
}

// TestRerouteObservation counts a re-route observation by its code, and
// one without an error as code other; neither counts as a message.
func TestRerouteObservation(t *testing.T) {
	m, err := metrics.New(metrics.Config{})
	require.NoError(t, err)
	m.Observe(bus.Observation{Op: bus.OpReroute, ServiceID: bus.ServiceID("svc", message.NewUUID()), Type: "t", Err: message.ErrNodeLeft})
	m.Observe(bus.Observation{Op: bus.OpReroute, ServiceID: "svc", Type: "t"})
	fams := scrape(t, m)
	assert.InDelta(t, 1, value(find(fams, "cloudbus_reroutes_total", map[string]string{"service": "svc", "type": "t", "code": string(message.ErrNodeLeft.Code)})), 0)
	assert.InDelta(t, 1, value(find(fams, "cloudbus_reroutes_total", map[string]string{"code": "other"})), 0)
	assert.NotContains(t, fams, "cloudbus_messages_total")
}

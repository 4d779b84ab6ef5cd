package metrics_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/metrics"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// StartVm names the VM it is about, so it runs on the VM's owner.
type StartVm struct{ VM string }

func (m StartVm) ResourceUUID() string { return m.VM }

// Started is StartVm's reply.
type Started struct{ Node string }

const (
	startType = "metricstest.v1.StartVm"
	service1  = "vmInstance"
)

// missing is the VM the handler does not find.
var missing = message.NewUUID()

func vmMux() *bus.Mux {
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, r *bus.Request, m StartVm) (Started, error) {
		if m.VM == missing {
			return Started{}, message.ErrNotFound
		}
		return Started{Node: r.Node()}, nil
	})
	return mux
}

func registry() *message.Registry {
	reg := message.NewRegistry()
	message.MustRegister[StartVm](reg, startType)
	message.MustRegister[Started](reg, "metricstest.v1.Started")
	return reg
}

// cluster starts n nodes on the in-memory bus, each observed by its own
// Metrics; it closes them at the test's end.
func cluster(t *testing.T, n int) ([]*service.Node, []*metrics.Metrics) {
	t.Helper()
	ctx := t.Context()
	net, store, reg := membus.New(), memstore.New(memstore.Config{}), registry()
	var nodes []*service.Node
	var ms []*metrics.Metrics
	for range n {
		id := message.NewUUID()
		tr := net.Transport(id)
		m, err := metrics.New(metrics.Config{Transport: tr})
		require.NoError(t, err)
		node, err := service.StartNode(ctx, service.Config{Node: id, Transport: tr, OwnTransport: true,
			Store: store.For(id), Registry: reg, Heartbeat: heartbeat.TestConfig(), Observer: m,
			Services: []service.Service{service.API(service1, vmMux())}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = node.Close() })
		m.SetNode(node)
		nodes = append(nodes, node)
		ms = append(ms, m)
	}
	for _, node := range nodes {
		require.NoError(t, node.AwaitMembers(ctx, n))
		require.Eventually(t, func() bool { return len(node.Heartbeats()) == n }, 10*time.Second, 5*time.Millisecond,
			"every node's heartbeat monitor lists every node")
	}
	return nodes, ms
}

// scrape GETs m's handler and parses the text format.
func scrape(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	m.Handler().ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	require.NoError(t, err, "the handler's output parses as the text format")
	return fams
}

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string)
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// find returns the metric of family name whose labels include want.
func find(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		got := labels(m)
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

func TestMetricsOnCluster(t *testing.T) {
	nodes, ms := cluster(t, 3)
	ctx := t.Context()
	var vms []string
	for range 20 {
		vm := message.NewUUID()
		vms = append(vms, vm)
		_, err := service.Call[Started](ctx, nodes[0], StartVm{VM: vm})
		require.NoError(t, err)
	}
	_, err := service.Call[Started](ctx, nodes[0], StartVm{VM: missing})
	require.ErrorIs(t, err, message.ErrNotFound)
	vms = append(vms, missing)

	// A call re-routed (a ring that just changed) is sent, and handled,
	// once more: the counts below take its re-routes in.
	rerouted := sum(t, ms[:1], "cloudbus_reroutes_total", nil)
	fams := scrape(t, ms[0])
	call := map[string]string{"op": "call", "service": service1, "type": startType}
	assert.InDelta(t, 21+rerouted, value(find(fams, "cloudbus_messages_total", call)), 0, "calls counted by service and type")
	assert.InDelta(t, 21+rerouted, value(find(fams, "cloudbus_call_duration_seconds", map[string]string{"service": service1, "type": startType})), 0,
		"every call's round trip is in the caller's histogram")
	assert.InDelta(t, 1, value(find(fams, "cloudbus_message_failures_total", map[string]string{"op": "call", "type": startType,
		"code": string(message.CodeOf(message.ErrNotFound))})), 0, "the failed call counted with its code")
	assert.InDelta(t, 3, value(find(fams, "cloudbus_ring_members", nil)), 0)
	assert.InDelta(t, 1, value(find(fams, "cloudbus_node_state", map[string]string{"state": "serving"})), 0)
	assert.InDelta(t, 0, value(find(fams, "cloudbus_node_state", map[string]string{"state": "leaving"})), 0)
	assert.InDelta(t, 1, value(find(fams, "cloudbus_transport_connected", nil)), 0)
	assert.InDelta(t, 1, value(find(fams, "cloudbus_ring_info", map[string]string{"fingerprint": nodes[0].Fingerprint().String()})), 0,
		"the ring's fingerprint is an info label")
	assert.InDelta(t, 2, value(find(fams, "cloudbus_membership_joins_total", nil)), 2, "the peers (and itself) joined")
	for _, name := range []string{"cloudbus_heartbeat_members", "cloudbus_bus_deliveries_total", "cloudbus_drained_messages_total",
		"cloudbus_bus_pending_calls", "cloudbus_evictions_total", "cloudbus_membership_leaves_total", "go_goroutines"} {
		assert.Contains(t, fams, name)
	}

	// Handlers ran on the owners: the handle histograms across the nodes
	// count every call once.
	var handled, share float64
	for _, m := range ms {
		f := scrape(t, m)
		if h := find(f, "cloudbus_handle_duration_seconds", map[string]string{"service": service1, "type": startType}); h != nil {
			handled += value(h) // a node that owned none of the VMs has no series
		}
		share += value(find(f, "cloudbus_ring_ownership_ratio", nil))
	}
	assert.InDelta(t, 21+rerouted, handled, 0, "every call handled once, on its owner (a re-routed one once more, refused where it went first)")
	assert.InDelta(t, 1, share, 1e-9, "the nodes' ownership shares add up to 1")

	// Label values are bounded: no resource UUID, no message id; node
	// UUIDs only as peers of the heartbeat age gauge.
	peers := map[string]bool{}
	for _, n := range nodes {
		peers[n.UUID()] = true
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for k, v := range labels(m) {
				assert.NotContains(t, vms, v, "%s{%s} holds a resource UUID", name, k)
				if peers[v] {
					assert.Equal(t, "cloudbus_heartbeat_age_seconds/peer", name+"/"+k, "a node UUID outside the per-peer heartbeat age")
				}
				if k == "service" {
					assert.NotContains(t, v, nodes[0].UUID(), "a service label holds the node UUID")
				}
			}
		}
	}
	assert.Len(t, fams["cloudbus_heartbeat_age_seconds"].GetMetric(), 2, "one age per peer")
}

func TestLabelBounds(t *testing.T) {
	m, err := metrics.New(metrics.Config{MaxSeries: 10})
	require.NoError(t, err)
	for i := range 100 {
		m.Observe(bus.Observation{Op: bus.OpReject, ServiceID: "svc." + message.NewUUID(),
			Type: "t" + string(rune('a'+i%26)) + strings.Repeat("x", i), Err: message.ErrBadRequest})
	}
	m.Observe(bus.Observation{Op: bus.OpHandle, ServiceID: "svc", Type: "bad\ntype", Err: errors.New("boom")})
	m.Observe(bus.Observation{Op: bus.OpHandle, ServiceID: "svc", Type: strings.Repeat("y", 200)})
	fams := scrape(t, m)
	assert.LessOrEqual(t, len(fams["cloudbus_messages_total"].GetMetric()), 12, "series past MaxSeries count as type=other")
	assert.NotNil(t, find(fams, "cloudbus_messages_total", map[string]string{"op": "reject", "type": "other"}), "the overflow series")
	var total float64
	for _, mm := range fams["cloudbus_messages_total"].GetMetric() {
		total += mm.Counter.GetValue()
		l := labels(mm)
		assert.Equal(t, "svc", l["service"], "the service label never holds the node UUID")
		assert.LessOrEqual(t, len(l["type"]), 128)
		assert.NotContains(t, l["type"], "\n")
	}
	assert.InDelta(t, 102, total, 0, "every observation counted")
	assert.NotNil(t, find(fams, "cloudbus_message_failures_total", map[string]string{"op": "handle", "type": "other", "code": "internal"}),
		"a plain error counts under its code")
}

func TestConfig(t *testing.T) {
	_, err := metrics.New(metrics.Config{MaxSeries: -1, Pools: map[string]*sql.DB{"": nil}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MaxSeries")
	assert.Contains(t, err.Error(), "pool")

	m, err := metrics.New(metrics.Config{})
	require.NoError(t, err)
	_, err = metrics.New(metrics.Config{Registry: m.Registry()})
	require.Error(t, err, "a second adapter on the same registry")
	assert.Contains(t, err.Error(), "register")
	// Without a node, a scrape still works.
	fams := scrape(t, m)
	assert.NotContains(t, fams, "cloudbus_ring_members")
	// SetNode(nil) is allowed.
	m.SetNode(nil)
}

func TestPools(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/pool.db")
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.PingContext(t.Context()))
	m, err := metrics.New(metrics.Config{Pools: map[string]*sql.DB{"services": db}})
	require.NoError(t, err)
	fams := scrape(t, m)
	assert.InDelta(t, 1, value(find(fams, "go_sql_open_connections", map[string]string{"db_name": "services"})), 0,
		"the pool's open connections, by its name")
	assert.NotNil(t, find(fams, "go_sql_wait_duration_seconds_total", map[string]string{"db_name": "services"}))
}

// TestEviction reads a servicetest cluster's nodes after one is killed:
// the survivors evict it, and their ring, heartbeat and membership
// metrics say so.
func TestEviction(t *testing.T) {
	c := servicetest.Start(t, servicetest.Options{Nodes: 3})
	c.WaitConverged(t, 10*time.Second)
	var ms []*metrics.Metrics
	for _, n := range c.Live() {
		m, err := metrics.New(metrics.Config{Node: n})
		require.NoError(t, err)
		ms = append(ms, m)
	}
	victim := c.Node(2).UUID()
	c.Kill(victim)
	c.WaitGone(t, victim, 10*time.Second)
	var evictions float64
	for _, m := range ms[:2] {
		c.WaitFor(t, 10*time.Second, "the dead node's record gone from the survivors' heartbeat lists", func() bool {
			return find(scrape(t, m), "cloudbus_heartbeat_age_seconds", map[string]string{"peer": victim}) == nil
		})
		fams := scrape(t, m)
		assert.InDelta(t, 2, value(find(fams, "cloudbus_ring_members", nil)), 0)
		assert.InDelta(t, 1, value(find(fams, "cloudbus_membership_leaves_total", nil)), 0, "the victim left each survivor's ring once")
		assert.Len(t, fams["cloudbus_heartbeat_age_seconds"].GetMetric(), 1, "one peer left")
		evictions += value(find(fams, "cloudbus_evictions_total", nil))
	}
	assert.GreaterOrEqual(t, evictions, 1.0, "a survivor evicted the dead node")
}

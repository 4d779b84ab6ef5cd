package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/service"
)

// The metrics acceptance test's sizes and bounds.
const (
	metHostsPerNode = 20  // hosts added per owner: 60 AddHost calls
	metGets         = 90  // GetHost calls after them
	metMaxSeries    = 200 // distinct label sets a family may have on one node
	metEvictBound   = 15 * time.Second
)

// The families every node serves from its start (state read at each
// scrape), and those that appear with traffic (the message flow).
var (
	metStateFamilies = []string{
		"cloudbus_node_state", "cloudbus_node_epoch", "cloudbus_lease_expired",
		"cloudbus_ring_members", "cloudbus_ring_ownership_ratio", "cloudbus_ring_info",
		"cloudbus_heartbeat_members", "cloudbus_heartbeat_age_seconds",
		"cloudbus_membership_joins_total", "cloudbus_membership_leaves_total", "cloudbus_evictions_total",
		"cloudbus_bus_pending_calls", "cloudbus_bus_running_handlers", "cloudbus_bus_queued_messages",
		"cloudbus_transport_connected", "cloudbus_transport_connections_lost_total", "cloudbus_transport_publishes_refused_total",
		"go_sql_open_connections", "go_sql_in_use_connections", "go_sql_max_open_connections",
	}
	metFlowFamilies = []string{
		"cloudbus_messages_total", "cloudbus_call_duration_seconds", "cloudbus_handle_duration_seconds",
	}
)

// TestMetricsUnderAKill scrapes GET /metrics of three `refnode serve`
// processes on RabbitMQ and PostgreSQL (fast heartbeat timing) before
// and after traffic and after a SIGKILL of one node, parses it with
// expfmt, and checks that:
//
//   - every node serves the state families (node, ring, heartbeat,
//     membership, bus, transport, go_sql_*) from its start, and the
//     message-flow families after the traffic;
//   - the traffic (60 AddHost, 90 GetHost through api.portal, one GetHost
//     of an unknown host) moved the counters: each node counted handles of
//     the host service and handle-duration samples, the cluster counted
//     at least one call-duration sample per call (the portals' forwards),
//     and the refused GetHost counted one handle failure;
//   - after the kill, both survivors' cloudbus_ring_members fall to 2 and
//     their cloudbus_ring_info fingerprints are equal (and those of a ring
//     of the two), cloudbus_membership_leaves_total rose by one on each,
//     and cloudbus_evictions_total rose by one on exactly one survivor:
//     the metric counts the nodes this node's monitor evicted, and the
//     eviction is a conditional delete of the dead node's record, which
//     one survivor wins; the other sees the record vanish (or the
//     winner's NodeLeft broadcast) and counts a leave only;
//   - every family has fewer than 200 label sets per node, no label value
//     holds a resource UUID the test used, and node UUIDs appear only as
//     the peer label of cloudbus_heartbeat_age_seconds.
//
// It prints the number of families and series of each node and the time
// from the kill until both survivors' rings held two members.
func TestMetricsUnderAKill(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{FullSpeed: true, Timeout: 55 * time.Second})
	testStart := time.Now()
	pc := newProcCluster(t, ctx, broker, onPostgres, "metrics")
	args := []string{"-bus", broker, "-db", pc.db, "-heartbeat", procHeartbeat.String(), "-evict-after", procEvictAfter.String(), "-ping-interval", "1s"}
	var nodes []*child
	for _, label := range []string{"A", "B", "C"} {
		nodes = append(nodes, pc.serve(t, label, args, nil))
	}
	ids, r := awaitAgreed(t, ctx, nodes)
	t.Logf("3 nodes serving and agreeing %s after the test began", time.Since(testStart).Round(time.Millisecond))
	nodeIDs := map[string]bool{}
	for _, id := range ids {
		nodeIDs[id] = true
	}

	// Before the traffic: the state families, three members, one ring. A
	// ring may agree (by the joiners' broadcasts) before a monitor listed
	// the last joiner's record: wait until each node's
	// cloudbus_heartbeat_members counts 3 records up.
	var before []map[string]*dto.MetricFamily
	require.NoError(t, poll(ctx, func() error {
		var err error
		if before, err = scrapeAllCtx(ctx, nodes); err != nil {
			return err
		}
		for i, c := range nodes {
			if up := sumOf(before[i], "cloudbus_heartbeat_members", map[string]string{"state": "up"}); up != 3 {
				return fmt.Errorf("node %s's monitor lists %.0f records up", c.label, up)
			}
		}
		return nil
	}), "every monitor lists the 3 nodes")
	for i, c := range nodes {
		requireFamilies(t, c, before[i], metStateFamilies)
		assert.Equal(t, 3.0, sumOf(before[i], "cloudbus_ring_members", nil), "node %s's ring holds 3 members", c.label)
		assert.Equal(t, 1.0, sumOf(before[i], "cloudbus_node_state", map[string]string{"state": "serving"}), "node %s serves", c.label)
		assert.Equal(t, 1.0, sumOf(before[i], "cloudbus_transport_connected", nil), "node %s reaches the broker", c.label)
		assert.Equal(t, fingerprintOf(t, before[i]), r.Fingerprint().String(), "node %s's ring_info holds the 3-node ring's fingerprint", c.label)
		assert.Len(t, seriesOf(before[i], "cloudbus_heartbeat_age_seconds"), 2, "node %s gives the age of its 2 peers' beats", c.label)
		t.Logf("node %s before the traffic: %s", c.label, figures(before[i]))
	}

	// The traffic, through api.portal: hosts owned by each node, read back,
	// and one read of a host nobody added.
	cl := newClient(t, ctx, broker, pc.prefix)
	hosts := idsOwnedBy(t, r, ids, metHostsPerNode)
	for i, h := range hosts {
		_, err := service.Call[api.HostReply](ctx, cl, api.AddHost{UUID: h, Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)})
		require.NoError(t, err, "AddHost %s", h)
	}
	for i := range metGets {
		h := hosts[i%len(hosts)]
		rep, err := service.Call[api.HostReply](ctx, cl, api.GetHost{UUID: h})
		require.NoError(t, err, "GetHost %s", h)
		require.Equal(t, mustOwner(t, r, h), rep.Node, "GetHost ran on the host's owner")
	}
	unknown := message.NewUUID()
	_, err := service.Call[api.HostReply](ctx, cl, api.GetHost{UUID: unknown})
	require.Error(t, err, "GetHost of a host nobody added")
	t.Logf("GetHost of an unknown host: %v", err)
	calls := float64(len(hosts) + metGets + 1)
	resources := append(slices.Clone(hosts), unknown)

	after := scrapeAll(t, nodes)
	var callsCounted, failures float64
	hostHandle := map[string]string{"op": "handle", "service": api.HostService}
	for i, c := range nodes {
		requireFamilies(t, c, after[i], metStateFamilies)
		requireFamilies(t, c, after[i], metFlowFamilies)
		d := sumOf(after[i], "cloudbus_messages_total", hostHandle) - sumOf(before[i], "cloudbus_messages_total", hostHandle)
		assert.GreaterOrEqual(t, d, float64(metHostsPerNode), "node %s counted a handle of the host service for each of its hosts' AddHost at least", c.label)
		dh := sumOf(after[i], "cloudbus_handle_duration_seconds", map[string]string{"service": api.HostService}) -
			sumOf(before[i], "cloudbus_handle_duration_seconds", map[string]string{"service": api.HostService})
		assert.GreaterOrEqual(t, dh, float64(metHostsPerNode), "node %s's host handle-duration histogram counted its handles", c.label)
		callsCounted += sumOf(after[i], "cloudbus_call_duration_seconds", nil) - sumOf(before[i], "cloudbus_call_duration_seconds", nil)
		failures += sumOf(after[i], "cloudbus_message_failures_total", hostHandle) - sumOf(before[i], "cloudbus_message_failures_total", hostHandle)
		t.Logf("node %s after the traffic: %s; +%.0f host handles", c.label, figures(after[i]), d)
	}
	assert.GreaterOrEqual(t, callsCounted, calls, "the portals' forwards: a call-duration sample per call at least")
	assert.Equal(t, 1.0, failures, "the GetHost of an unknown host: one handle failure of the host service")

	// SIGKILL the first node; the survivors evict it.
	victim, survivors := nodes[0], nodes[1:]
	killed := time.Now()
	require.NoError(t, victim.signal(syscall.SIGKILL, 10*time.Second))
	kctx, cancel := context.WithTimeout(ctx, metEvictBound)
	defer cancel()
	var last []map[string]*dto.MetricFamily
	require.NoError(t, poll(kctx, func() error {
		last = last[:0]
		for _, c := range survivors {
			fams, err := scrape(kctx, c)
			if err != nil {
				return err
			}
			if m := sumOf(fams, "cloudbus_ring_members", nil); m != 2 {
				return fmt.Errorf("node %s's ring holds %.0f members", c.label, m)
			}
			last = append(last, fams)
		}
		return nil
	}), "both survivors' cloudbus_ring_members fall to 2 within %s", metEvictBound)
	dropped := time.Since(killed)
	t.Logf("kill to ring_members 2 on both survivors: %s", dropped.Round(time.Millisecond))

	// Evictions: counted by the survivor whose monitor deleted the record.
	// Poll until one counted it and neither lists the killed node's
	// heartbeat: the other survivor may drop the node from its ring on the
	// evictor's NodeLeft broadcast before its monitor's next list.
	r2 := ringOver(t, idsOf(survivors))
	require.NoError(t, poll(kctx, func() error {
		var err error
		if last, err = scrapeAllCtx(kctx, survivors); err != nil {
			return err
		}
		evicted := 0.0
		for i := range survivors {
			evicted += sumOf(last[i], "cloudbus_evictions_total", nil) - sumOf(after[i+1], "cloudbus_evictions_total", nil)
		}
		if evicted == 0 {
			return fmt.Errorf("no survivor counted an eviction yet")
		}
		for i, c := range survivors {
			for _, s := range seriesOf(last[i], "cloudbus_heartbeat_age_seconds") {
				if s.labels["peer"] == victim.id {
					return fmt.Errorf("node %s still lists the killed node's beat, %.3f s old", c.label, s.value)
				}
			}
		}
		return nil
	}), "a survivor counts the eviction and no survivor lists the killed node's beat")
	settled := time.Since(killed)
	t.Logf("kill to both survivors' metrics settled (eviction counted, heartbeat listed): %s", settled.Round(time.Millisecond))
	var evictors []string
	for i, c := range survivors {
		fams, prev := last[i], after[i+1]
		requireFamilies(t, c, fams, metStateFamilies)
		requireFamilies(t, c, fams, metFlowFamilies)
		assert.Equal(t, 2.0, sumOf(fams, "cloudbus_ring_members", nil), "node %s's ring holds the 2 survivors", c.label)
		assert.Equal(t, r2.Fingerprint().String(), fingerprintOf(t, fams), "node %s's ring_info holds the survivors' ring's fingerprint", c.label)
		assert.Equal(t, 1.0, sumOf(fams, "cloudbus_membership_leaves_total", nil)-sumOf(prev, "cloudbus_membership_leaves_total", nil),
			"node %s counted one member leaving its ring", c.label)
		assert.Equal(t, 0.0, sumOf(fams, "cloudbus_membership_joins_total", nil)-sumOf(prev, "cloudbus_membership_joins_total", nil),
			"node %s counted no join", c.label)
		switch e := sumOf(fams, "cloudbus_evictions_total", nil) - sumOf(prev, "cloudbus_evictions_total", nil); e {
		case 0:
		case 1:
			evictors = append(evictors, c.label)
		default:
			t.Errorf("node %s counted %.0f evictions after one kill", c.label, e)
		}
		assert.Len(t, seriesOf(fams, "cloudbus_heartbeat_age_seconds"), 1, "node %s gives the age of its 1 peer's beats", c.label)
		t.Logf("node %s after the kill: %s", c.label, figures(fams))
	}
	assert.Len(t, evictors, 1, "exactly one survivor counted the eviction: %v", evictors)
	assert.Equal(t, fingerprintOf(t, last[0]), fingerprintOf(t, last[1]), "the survivors' ring_info fingerprints are equal")

	// Bounded labels, on every scrape of every node.
	for _, s := range []struct {
		what  string
		nodes []*child
		fams  []map[string]*dto.MetricFamily
	}{{"before the traffic", nodes, before}, {"after the traffic", nodes, after}, {"after the kill", survivors, last}} {
		for i, c := range s.nodes {
			checkLabels(t, fmt.Sprintf("node %s %s", c.label, s.what), s.fams[i], resources, nodeIDs)
		}
	}
	t.Logf("evicted by node %v; test took %s", evictors, time.Since(testStart).Round(time.Millisecond))
}

// scrape fetches and parses GET /metrics of c's admin listener.
func scrape(ctx context.Context, c *child) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.admin+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics of node %s: %w", c.admin, c.label, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s/metrics of node %s: %s: %s", c.admin, c.label, resp.Status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics of node %s: %w", c.label, err)
	}
	return fams, nil
}

// scrapeAllCtx scrapes each node, in order.
func scrapeAllCtx(ctx context.Context, nodes []*child) ([]map[string]*dto.MetricFamily, error) {
	out := make([]map[string]*dto.MetricFamily, len(nodes))
	for i, c := range nodes {
		fams, err := scrape(ctx, c)
		if err != nil {
			return nil, err
		}
		out[i] = fams
	}
	return out, nil
}

// scrapeAll scrapes each node, in order, failing the test on an error.
func scrapeAll(t *testing.T, nodes []*child) []map[string]*dto.MetricFamily {
	t.Helper()
	out, err := scrapeAllCtx(t.Context(), nodes)
	require.NoError(t, err)
	return out
}

// requireFamilies fails the test unless every family of names is in fams
// with at least one series.
func requireFamilies(t *testing.T, c *child, fams map[string]*dto.MetricFamily, names []string) {
	t.Helper()
	var missing []string
	for _, name := range names {
		if f, ok := fams[name]; !ok || len(f.GetMetric()) == 0 {
			missing = append(missing, name)
		}
	}
	require.Empty(t, missing, "node %s serves these families (it serves %v)", c.label, slices.Sorted(maps.Keys(fams)))
}

// series is one sample of a family: its labels and its value (a
// histogram's sample count).
type series struct {
	labels map[string]string
	value  float64
}

// seriesOf returns the series of family name in fams.
func seriesOf(fams map[string]*dto.MetricFamily, name string) []series {
	f, ok := fams[name]
	if !ok {
		return nil
	}
	var out []series
	for _, m := range f.GetMetric() {
		s := series{labels: map[string]string{}}
		for _, l := range m.GetLabel() {
			s.labels[l.GetName()] = l.GetValue()
		}
		switch {
		case m.Counter != nil:
			s.value = m.GetCounter().GetValue()
		case m.Gauge != nil:
			s.value = m.GetGauge().GetValue()
		case m.Histogram != nil:
			s.value = float64(m.GetHistogram().GetSampleCount())
		case m.Summary != nil:
			s.value = float64(m.GetSummary().GetSampleCount())
		case m.Untyped != nil:
			s.value = m.GetUntyped().GetValue()
		}
		out = append(out, s)
	}
	return out
}

// sumOf sums the series of family name whose labels include match (a
// histogram counts its samples); 0 if there is none.
func sumOf(fams map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	sum := 0.0
	for _, s := range seriesOf(fams, name) {
		ok := true
		for k, v := range match {
			if s.labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			sum += s.value
		}
	}
	return sum
}

// fingerprintOf returns the fingerprint label of the one
// cloudbus_ring_info series.
func fingerprintOf(t *testing.T, fams map[string]*dto.MetricFamily) string {
	t.Helper()
	s := seriesOf(fams, "cloudbus_ring_info")
	require.Len(t, s, 1, "one cloudbus_ring_info series")
	return s[0].labels["fingerprint"]
}

// figures counts the families and series in fams, and those of them
// named cloudbus_*.
func figures(fams map[string]*dto.MetricFamily) string {
	var families, series, ownFamilies, ownSeries int
	for name, f := range fams {
		families++
		series += len(f.GetMetric())
		if strings.HasPrefix(name, "cloudbus_") {
			ownFamilies++
			ownSeries += len(f.GetMetric())
		}
	}
	return fmt.Sprintf("%d families, %d series (cloudbus_*: %d families, %d series)", families, series, ownFamilies, ownSeries)
}

// checkLabels checks that each family of fams has fewer than
// metMaxSeries label sets, that no label value holds one of resources,
// and that node UUIDs appear only as cloudbus_heartbeat_age_seconds's
// peer.
func checkLabels(t *testing.T, what string, fams map[string]*dto.MetricFamily, resources []string, nodeIDs map[string]bool) {
	t.Helper()
	for name, f := range fams {
		sets := map[string]bool{}
		for _, s := range seriesOf(fams, name) {
			keys := slices.Sorted(maps.Keys(s.labels))
			var b strings.Builder
			for _, k := range keys {
				v := s.labels[k]
				fmt.Fprintf(&b, "%s=%q,", k, v)
				for _, res := range resources {
					if strings.Contains(strings.ToLower(v), res) {
						t.Errorf("%s: %s{%s=%q} holds the resource UUID %s", what, name, k, v, res)
					}
				}
				for id := range nodeIDs {
					if strings.Contains(v, id) && (name != "cloudbus_heartbeat_age_seconds" || k != "peer") {
						t.Errorf("%s: %s{%s=%q} holds the node UUID %s", what, name, k, v, id)
					}
				}
			}
			sets[b.String()] = true
		}
		assert.Less(t, len(sets), metMaxSeries, "%s: family %s has a bounded label set", what, name)
		assert.Equal(t, len(f.GetMetric()), len(sets), "%s: family %s has no duplicate series", what, name)
	}
}

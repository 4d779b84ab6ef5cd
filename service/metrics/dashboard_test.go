package metrics_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/metrics"
)

// dashboardFile is the Grafana dashboard the operations guide links.
const dashboardFile = "../../docs/grafana/cloudbus.json"

// dashboard is the part of a Grafana dashboard's JSON the test reads.
type dashboard struct {
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr       string `json:"expr"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

// query is one PromQL expression of the dashboard and the panel it is in.
type query struct {
	panel, expr string
}

// loadDashboard parses the dashboard and returns it with every query of
// every panel, rows' nested panels included; it fails the test on a
// panel without a title, a description, a query or the ${datasource}
// data source, and on duplicate panel ids.
func loadDashboard(t *testing.T) (dashboard, []query) {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	require.NoError(t, err, "read the dashboard")
	var d dashboard
	require.NoError(t, json.Unmarshal(data, &d), "the dashboard is JSON")
	require.NotEmpty(t, d.Title)
	require.GreaterOrEqual(t, d.SchemaVersion, 36, "a schema version current Grafana imports as is")
	var qs []query
	ids := map[int]string{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.Type == "row" {
				assert.Empty(t, p.Targets, "row %q has queries", p.Title)
				walk(p.Panels)
				continue
			}
			assert.NotEmpty(t, p.Title, "panel %d has no title", p.ID)
			assert.NotEmpty(t, p.Description, "panel %q has no description", p.Title)
			if assert.NotNil(t, p.Datasource, "panel %q has no data source", p.Title) {
				assert.Equal(t, "${datasource}", p.Datasource.UID, "panel %q's data source is not the dashboard's variable", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q has an empty query", p.Title)
					continue
				}
				if tg.Datasource != nil {
					assert.Equal(t, "${datasource}", tg.Datasource.UID, "panel %q: a query's data source is not the dashboard's variable", p.Title)
				}
				qs = append(qs, query{panel: p.Title, expr: tg.Expr})
			}
		}
	}
	walk(d.Panels)
	require.NotEmpty(t, qs, "the dashboard has queries")
	return d, qs
}

// promqlWords are PromQL's keywords, aggregation operators and the
// functions the dashboard may use; an identifier among them never names
// a metric. (A function is also recognised by the "(" after it.)
var promqlWords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
	"on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true,
	"sum": true, "min": true, "max": true, "avg": true, "count": true, "stddev": true, "stdvar": true,
	"topk": true, "bottomk": true, "quantile": true, "count_values": true, "group": true,
}

// groupingWords take a parenthesised list of label names.
var groupingWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// selector is a metric name found in a query, with the label names its
// matchers use.
type selector struct {
	name   string
	labels []string
}

// selectors tokenizes a PromQL expression and returns the metric names
// it selects: identifiers that are not keywords, functions, label names
// (in {...} or a grouping list), durations, numbers, strings or Grafana
// variables ($x, ${x}).
func selectors(expr string) ([]selector, error) {
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	ident := func(i int) int {
		for i < len(expr) && isPart(expr[i]) {
			i++
		}
		return i
	}
	skipSpace := func(i int) int {
		for i < len(expr) && (expr[i] == ' ' || expr[i] == '\t' || expr[i] == '\n') {
			i++
		}
		return i
	}
	// skipString returns the index after the string literal starting at i.
	skipString := func(i int) (int, error) {
		q := expr[i]
		for j := i + 1; j < len(expr); j++ {
			switch expr[j] {
			case '\\':
				j++
			case q:
				return j + 1, nil
			}
		}
		return 0, fmt.Errorf("unterminated string at %d in %q", i, expr)
	}
	// matchers reads the label names of {...} starting at i.
	matchers := func(i int) ([]string, int, error) {
		var names []string
		i++
		for {
			i = skipSpace(i)
			if i >= len(expr) {
				return nil, 0, fmt.Errorf("unterminated {...} in %q", expr)
			}
			switch c := expr[i]; {
			case c == '}':
				return names, i + 1, nil
			case c == ',':
				i++
			case isStart(c):
				j := ident(i)
				names = append(names, expr[i:j])
				i = skipSpace(j)
				for i < len(expr) && strings.IndexByte("=!~", expr[i]) >= 0 {
					i++
				}
				i = skipSpace(i)
				if i >= len(expr) || expr[i] != '"' && expr[i] != '\'' && expr[i] != '`' {
					return nil, 0, fmt.Errorf("label %s has no quoted value in %q", names[len(names)-1], expr)
				}
				var err error
				if i, err = skipString(i); err != nil {
					return nil, 0, err
				}
			default:
				return nil, 0, fmt.Errorf("unexpected %q in {...} of %q", c, expr)
			}
		}
	}
	var out []selector
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$': // a Grafana variable: $name or ${name}
			i++
			if i < len(expr) && expr[i] == '{' {
				end := strings.IndexByte(expr[i:], '}')
				if end < 0 {
					return nil, fmt.Errorf("unterminated ${...} in %q", expr)
				}
				i += end + 1
			} else {
				i = ident(i)
			}
		case c >= '0' && c <= '9' || c == '.': // a number or a duration (5m, 1h30m)
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		case c == '[': // a range or subquery: durations and variables only
			end := strings.IndexByte(expr[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("unterminated [...] in %q", expr)
			}
			i += end + 1
		case c == '{': // matchers without a metric name
			_, j, err := matchers(i)
			if err != nil {
				return nil, err
			}
			i = j
		case isStart(c):
			j := ident(i)
			word := expr[i:j]
			k := skipSpace(j)
			switch {
			case groupingWords[word] && k < len(expr) && expr[k] == '(':
				end := strings.IndexByte(expr[k:], ')')
				if end < 0 {
					return nil, fmt.Errorf("unterminated %s (...) in %q", word, expr)
				}
				i = k + end + 1
			case promqlWords[word] || k < len(expr) && expr[k] == '(':
				i = j // a keyword, an aggregation or a function
			default:
				s := selector{name: word}
				i = j
				if k < len(expr) && expr[k] == '{' {
					names, next, err := matchers(k)
					if err != nil {
						return nil, err
					}
					s.labels, i = names, next
				}
				out = append(out, s)
			}
		default:
			i++
		}
	}
	return out, nil
}

func TestSelectors(t *testing.T) {
	got, err := selectors(`histogram_quantile(0.99, sum by (le, service) (rate(a_bucket{op="call", instance=~"$instance"}[$__rate_interval])))` +
		` / on (instance) group_left (x) sum without (y) (b offset 5m) > bool 1e3 or count(count by (fingerprint) (c:d{x='}'}))` +
		` + ${v} * max(e[1h30m:1m])`)
	require.NoError(t, err)
	want := []selector{{name: "a_bucket", labels: []string{"op", "instance"}}, {name: "b"}, {name: "c:d", labels: []string{"x"}}, {name: "e"}}
	assert.Equal(t, want, got)
	for _, bad := range []string{`a{b="c"`, `a{b=c}`, `rate(a[5m)`, `a{b="c}`} {
		_, err := selectors(bad)
		assert.Error(t, err, "%s", bad)
	}
}

// lostCounter gives a membus transport amqpbus's ConnectionsLost, so the
// adapter exports cloudbus_transport_connections_lost_total.
type lostCounter struct{ driver.Transport }

func (lostCounter) ConnectionsLost() uint64 { return 0 }

// exposedFamilies builds a small cluster like a production one (three
// nodes on the in-memory bus, each with its adapter, the first with a
// database pool), sends calls, failed ones too, and returns every metric
// family the adapters' registries expose, with the labels of each.
func exposedFamilies(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	ctx := t.Context()
	db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/pool.db")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(ctx))

	const n = 3
	net, store, reg := membus.New(), memstore.New(memstore.Config{}), registry()
	var nodes []*service.Node
	var ms []*metrics.Metrics
	for i := range n {
		id := message.NewUUID()
		tr := net.Transport(id)
		cfg := metrics.Config{Transport: lostCounter{tr}}
		if i == 0 {
			cfg.Pools = map[string]*sql.DB{"services": db}
		}
		m, err := metrics.New(cfg)
		require.NoError(t, err)
		node, err := service.StartNode(ctx, service.Config{Node: id, Transport: tr, OwnTransport: true,
			Store: store.For(id), Registry: reg, Heartbeat: heartbeat.TestConfig(), Observer: m,
			Services: []service.Service{service.API(service1, vmMux())}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = node.Close() })
		m.SetNode(node)
		nodes, ms = append(nodes, node), append(ms, m)
	}
	for _, node := range nodes {
		require.NoError(t, node.AwaitMembers(ctx, n))
		require.Eventually(t, func() bool {
			_, _, clock := node.ClusterTime()
			return len(node.Heartbeats()) == n && clock
		}, 10*time.Second, 5*time.Millisecond, "every node lists every node and has the cluster time")
	}
	for range 10 {
		_, err := service.Call[Started](ctx, nodes[0], StartVm{VM: message.NewUUID()})
		require.NoError(t, err)
	}
	_, err = service.Call[Started](ctx, nodes[0], StartVm{VM: missing})
	require.ErrorIs(t, err, message.ErrNotFound)
	// A re-route needs a ring that changes under the calls (a node
	// evicted, or joining): the first node reports one as service.Call
	// does after a node_left, so cloudbus_reroutes_total is exposed on
	// every run, not only when the calls above raced the rings.
	ms[0].Observe(bus.Observation{Op: bus.OpReroute, ServiceID: bus.ServiceID(service1, nodes[1].UUID()), Type: startType, Err: message.ErrNodeLeft})

	fams := map[string]*dto.MetricFamily{}
	for _, m := range ms {
		got, err := m.Registry().Gather()
		require.NoError(t, err)
		for _, f := range got {
			if prev := fams[f.GetName()]; prev != nil {
				prev.Metric = append(prev.Metric, f.GetMetric()...)
				continue
			}
			fams[f.GetName()] = f
		}
	}
	return fams
}

// seriesNames maps each series name a scrape of fams holds (a histogram's
// _bucket, _sum and _count, a summary's _sum and _count) to its labels.
func seriesNames(fams map[string]*dto.MetricFamily) map[string][]string {
	out := map[string][]string{}
	for name, f := range fams {
		var labels []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[name+"_bucket"] = append(slices.Clone(labels), "le")
			out[name+"_sum"] = labels
			out[name+"_count"] = labels
		case dto.MetricType_SUMMARY:
			out[name] = append(slices.Clone(labels), "quantile")
			out[name+"_sum"] = labels
			out[name+"_count"] = labels
		default:
			out[name] = labels
		}
	}
	return out
}

// TestDashboard checks docs/grafana/cloudbus.json against a live
// adapter: every metric a query (or a variable) names is one the
// adapters expose, with the labels its matchers name, and the dashboard
// covers what an operator looks at first.
func TestDashboard(t *testing.T) {
	d, qs := loadDashboard(t)
	exposed := seriesNames(exposedFamilies(t))
	// The labels Prometheus adds to every series at scrape time.
	targetLabels := []string{"instance", "job"}

	used := map[string]bool{}
	check := func(where, expr string) {
		sels, err := selectors(expr)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			return
		}
		if len(sels) == 0 {
			t.Errorf("%s: %q selects no metric", where, expr)
		}
		for _, s := range sels {
			labels, ok := exposed[s.name]
			if !ok {
				t.Errorf("%s: unknown metric %s in %q", where, s.name, expr)
				continue
			}
			used[s.name] = true
			for _, l := range s.labels {
				if !slices.Contains(labels, l) && !slices.Contains(targetLabels, l) {
					t.Errorf("%s: metric %s has no label %s (it has %v) in %q", where, s.name, l, labels, expr)
				}
			}
		}
	}
	for _, q := range qs {
		check(fmt.Sprintf("panel %q", q.panel), q.expr)
	}

	// A query variable's label_values(metric, label) names a metric too.
	labelValues := regexp.MustCompile(`^label_values\(\s*([^,]+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)
	hasDatasource := false
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			hasDatasource = hasDatasource || v.Name == "datasource"
		case "query":
			var q struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &q); err != nil { // older dashboards store a plain string
				require.NoError(t, json.Unmarshal(v.Query, &q.Query), "variable %s's query", v.Name)
			}
			mm := labelValues.FindStringSubmatch(q.Query)
			if mm == nil {
				t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, q.Query)
				continue
			}
			check("variable "+v.Name, mm[1])
			sels, _ := selectors(mm[1])
			for _, s := range sels {
				if l := mm[2]; !slices.Contains(exposed[s.name], l) && !slices.Contains(targetLabels, l) {
					t.Errorf("variable %s: metric %s has no label %s", v.Name, s.name, l)
				}
			}
		}
	}
	assert.True(t, hasDatasource, "the dashboard has a data source variable named datasource")

	// The list: at least one query per topic.
	topics := []struct {
		topic string
		re    string
	}{
		{"members", `\bcloudbus_ring_members\b`},
		{"heartbeat members", `\bcloudbus_heartbeat_members\b`},
		{"ring agreement", `count\s*\(\s*count\s+by\s*\(\s*fingerprint\s*\)\s*\(\s*cloudbus_ring_info\b`},
		{"ownership", `\bcloudbus_ring_ownership_ratio\b`},
		{"call rate", `rate\(\s*cloudbus_messages_total\{[^}]*op="call"`},
		{"call latency", `histogram_quantile\([^,]+,.*\bcloudbus_call_duration_seconds_bucket\b`},
		{"handle latency", `histogram_quantile\([^,]+,.*\bcloudbus_handle_duration_seconds_bucket\b`},
		{"failures by code", `by\s*\([^)]*\bcode\b[^)]*\)\s*\(\s*rate\(\s*cloudbus_message_failures_total\b`},
		{"refusals", `cloudbus_message_failures_total\{[^}]*op="reject"`},
		{"evictions", `increase\(\s*cloudbus_evictions_total\b`},
		{"leaves", `increase\(\s*cloudbus_membership_leaves_total\b`},
		{"joins", `increase\(\s*cloudbus_membership_joins_total\b`},
		{"transport connected", `\bcloudbus_transport_connected\b`},
		{"connections lost", `\bcloudbus_transport_connections_lost_total\b`},
		{"database pools", `\bgo_sql_in_use_connections\b`},
		{"heartbeat age", `\bcloudbus_heartbeat_age_seconds\b`},
	}
	for _, tp := range topics {
		re := regexp.MustCompile(tp.re)
		if !slices.ContainsFunc(qs, func(q query) bool { return re.MatchString(q.expr) }) {
			t.Errorf("no query about %s (one matching %s)", tp.topic, tp.re)
		}
	}

	// And the adapter's own families all appear somewhere.
	for name := range exposed {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(name, "cloudbus_") && !used[name] && !used[base+"_bucket"] && !used[base+"_sum"] && !used[base+"_count"] {
			t.Errorf("the dashboard never shows %s", name)
		}
	}
}

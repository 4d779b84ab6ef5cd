package nodekit

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
)

func TestObservers(t *testing.T) {
	var got []int
	one := bus.ObserverFunc(func(bus.Observation) { got = append(got, 1) })
	two := bus.ObserverFunc(func(bus.Observation) { got = append(got, 2) })
	observers(nil, one, nil, two).Observe(bus.Observation{})
	assert.Equal(t, []int{1, 2}, got, "each observer, in order, nils skipped")
	got = nil
	observers(one, nil).Observe(bus.Observation{})
	assert.Equal(t, []int{1}, got)
}

// TestMetricsEndpoint opens a node (RabbitMQ, SQLite) and reads GET
// /metrics on its admin handler, with a program's own counter.
func TestMetricsEndpoint(t *testing.T) {
	url := testenv.AMQPURL(t)
	ctx := t.Context()
	n, err := Open(ctx, Config{Name: "metricstest", Stdout: io.Discard,
		Services: func(context.Context, Env) ([]service.Service, error) { return nil, nil }},
		Settings{Bus: url, DB: "sqlite:" + t.TempDir() + "/node.db", Prefix: "nodekit-metrics-" + message.NewUUID()[:8]})
	require.NoError(t, err)
	defer n.Close()
	own := prometheus.NewCounter(prometheus.CounterOpts{Name: "metricstest_things_total", Help: "Things."})
	require.NoError(t, n.Metrics().Registry().Register(own))
	own.Inc()

	rec := httptest.NewRecorder()
	n.Admin().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	body := rec.Body.String()
	for _, want := range []string{
		`cloudbus_node_state{state="new"} 1`,
		"cloudbus_transport_connected 1",
		`go_sql_open_connections{db_name="heartbeat"}`,
		`go_sql_open_connections{db_name="services"}`,
		"metricstest_things_total 1",
		"cloudbus_heartbeat_beats_total 0",
		"cloudbus_heartbeat_beat_failures_total 0",
		"cloudbus_heartbeat_beats_failing 0",
		`cloudbus_fence_runs_total 0`,
	} {
		assert.True(t, strings.Contains(body, want), "GET /metrics lacks %q:\n%s", want, body)
	}
}

// TestBeatCollector: the beats the kit timed, as counters and the
// current run of failures.
func TestBeatCollector(t *testing.T) {
	b := &beatStats{}
	now := time.Now()
	b.add(now, time.Millisecond, false)
	b.add(now, time.Millisecond, true)
	b.add(now, time.Millisecond, true)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(beatCollector{b}))
	got, err := reg.Gather()
	require.NoError(t, err)
	values := map[string]float64{}
	for _, mf := range got {
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			values[mf.GetName()] = c.GetValue()
		} else {
			values[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	assert.Equal(t, map[string]float64{
		"cloudbus_heartbeat_beats_total":         3,
		"cloudbus_heartbeat_beat_failures_total": 2,
		"cloudbus_heartbeat_beats_failing":       2,
	}, values)
}

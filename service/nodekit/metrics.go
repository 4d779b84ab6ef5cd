package nodekit

import (
	"database/sql"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/service/metrics"
)

// Metrics returns the node's Prometheus metrics, served on GET /metrics
// of the admin listener: the message flow, the node's state, the broker
// connection, the heartbeat and services pools (db_name "heartbeat"
// and "services"), the fence's runs, repeats and stale refusals, and
// the node's beats (cloudbus_heartbeat_beats_total,
// cloudbus_heartbeat_beat_failures_total, cloudbus_heartbeat_beats_failing). Register a program's own collectors on its
// Registry() to serve them there too.
func (n *Node) Metrics() *metrics.Metrics { return n.metrics }

// openMetrics builds the node's metrics and serves them on the admin
// handler; the node is set once it exists.
func (n *Node) openMetrics() error {
	m, err := metrics.New(metrics.Config{Transport: n.tr, Fence: n.fence,
		Pools: map[string]*sql.DB{"heartbeat": n.db.HeartbeatDB(), "services": n.db.DB()}})
	if err != nil {
		return fmt.Errorf("nodekit: %w", err)
	}
	if err := m.Registry().Register(beatCollector{n.admin.beats}); err != nil {
		return fmt.Errorf("nodekit: %w", err)
	}
	n.metrics = m
	n.admin.Handle("GET /metrics", m.Handler())
	return nil
}

// The heartbeat store's statements as the kit times them (the beats of
// GET /status's database section), read at each scrape.
var (
	beatsDesc = prometheus.NewDesc("cloudbus_heartbeat_beats_total",
		"Beats this node sent to the heartbeat store since it started, failed or not.", nil, nil)
	beatFailuresDesc = prometheus.NewDesc("cloudbus_heartbeat_beat_failures_total",
		"Beats that failed: the store refused or did not answer within the heartbeat's timeout.", nil, nil)
	beatsFailingDesc = prometheus.NewDesc("cloudbus_heartbeat_beats_failing",
		"Beats failed in a row since the last that succeeded: the lease expires after about Lease/Interval.", nil, nil)
)

// beatCollector exports a node's beat statistics.
type beatCollector struct{ b *beatStats }

// Describe implements prometheus.Collector.
func (c beatCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- beatsDesc
	ch <- beatFailuresDesc
	ch <- beatsFailingDesc
}

// Collect implements prometheus.Collector.
func (c beatCollector) Collect(ch chan<- prometheus.Metric) {
	c.b.mu.Lock()
	total, failed, run := c.b.total, c.b.failed, c.b.run
	c.b.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(beatsDesc, prometheus.CounterValue, float64(total))
	ch <- prometheus.MustNewConstMetric(beatFailuresDesc, prometheus.CounterValue, float64(failed))
	ch <- prometheus.MustNewConstMetric(beatsFailingDesc, prometheus.GaugeValue, float64(run))
}

// observers chains the observers that are not nil, in order.
func observers(obs ...bus.Observer) bus.Observer {
	var all []bus.Observer
	for _, o := range obs {
		if o != nil {
			all = append(all, o)
		}
	}
	if len(all) == 1 {
		return all[0]
	}
	return bus.ObserverFunc(func(o bus.Observation) {
		for _, x := range all {
			x.Observe(o)
		}
	})
}

package nodekit

import (
	"database/sql"
	"fmt"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/service/metrics"
)

// Metrics returns the node's Prometheus metrics, served on GET /metrics
// of the admin listener: the message flow, the node's state, the broker
// connection and the heartbeat and services pools (db_name "heartbeat"
// and "services"). Register a program's own collectors on its
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
	n.metrics = m
	n.admin.Handle("GET /metrics", m.Handler())
	return nil
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

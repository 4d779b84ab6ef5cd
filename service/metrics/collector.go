package metrics

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/service"
)

// stateCollector reads the node's state at each scrape.
type stateCollector struct {
	m *Metrics
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descNodeState    = desc("cloudbus_node_state", "1 for the node's current state (new, starting, serving, leaving, evicted, stopped), 0 for the others.", "state")
	descEpoch        = desc("cloudbus_node_epoch", "The epoch of the node's current life (0 before it joined).")
	descLeaseExpired = desc("cloudbus_lease_expired", "1 while the node could not beat for longer than its lease and refuses messages about resources.")
	descRingMembers  = desc("cloudbus_ring_members", "Members in this node's ring.")
	descRingShare    = desc("cloudbus_ring_ownership_ratio", "Share of the key space this node owns on its ring (0 to 1), from a fixed sample of keys.")
	descRingInfo     = desc("cloudbus_ring_info", "Always 1; fingerprint is the ring's membership fingerprint: nodes agree on owners when theirs are equal.", "fingerprint")
	descHBMembers    = desc("cloudbus_heartbeat_members", "Membership records as the node's heartbeat monitor last listed them, by state (up, bus_down).", "state")
	descHBAge        = desc("cloudbus_heartbeat_age_seconds", "Time since each peer's last beat, as last listed.", "peer")
	descJoins        = desc("cloudbus_membership_joins_total", "Members added to this node's ring.")
	descLeaves       = desc("cloudbus_membership_leaves_total", "Members removed from this node's ring, for any reason (goodbye, vanished record, eviction).")
	descEvictions    = desc("cloudbus_evictions_total", "Nodes this node evicted: they stopped beating or were cut off from the bus.")
	descClockOffset  = desc("cloudbus_clock_offset_seconds", "Cluster time minus this process's clock (the store's clock, as sampled).")
	descClockBound   = desc("cloudbus_clock_uncertainty_seconds", "Bound on the error of the cluster time estimate.")
	descPending      = desc("cloudbus_bus_pending_calls", "Calls waiting for a reply.")
	descRunning      = desc("cloudbus_bus_running_handlers", "Handlers running.")
	descQueued       = desc("cloudbus_bus_queued_messages", "Messages waiting for a handler on this node.")
	descBusEvents    = desc("cloudbus_bus_deliveries_total", "Deliveries by outcome, from the bus's counters (rejected includes late; the bus's counters restart with each life of the node).", "outcome")
	descDrainQueues  = desc("cloudbus_drained_queues_total", "Queues of departed nodes this node emptied and deleted.")
	descDrainMsgs    = desc("cloudbus_drained_messages_total", "Messages this node took from departed nodes' queues, by outcome (moved, late, dropped).", "outcome")
	descConnected    = desc("cloudbus_transport_connected", "1 while the transport reaches the broker.")
	descFenceRuns    = desc("cloudbus_fence_runs_total", "Transactions the node's fence ran and committed (Do and Run).")
	descFenceRepeats = desc("cloudbus_fence_repeats_total", "Messages handled before whose recorded reply the node's fence returned without running them again.")
	descFenceStale   = desc("cloudbus_fence_stale_total", "Writes the node's fence refused because their claim did not hold (the node lost the resource).")
	descConnLost     = desc("cloudbus_transport_connections_lost_total", "Times the transport lost its broker connection (and reconnected or closed).")
	descPubRefused   = desc("cloudbus_transport_publishes_refused_total", "Publishes the broker refused (nack) and the transport sent again, as while a quorum queue elects a leader.")
)

// Describe sends every descriptor.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNodeState, descEpoch, descLeaseExpired, descRingMembers, descRingShare,
		descRingInfo, descHBMembers, descHBAge, descJoins, descLeaves, descEvictions, descClockOffset, descClockBound,
		descPending, descRunning, descQueued, descBusEvents, descDrainQueues, descDrainMsgs, descConnected, descConnLost,
		descPubRefused, descFenceRuns, descFenceRepeats, descFenceStale} {
		ch <- d
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collect reads the node and transport.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	tr := c.m.transport
	if lc, ok := tr.(interface{ ConnectionsLost() uint64 }); ok {
		counter(ch, descConnLost, float64(lc.ConnectionsLost()))
	}
	if pr, ok := tr.(interface{ PublishesRefused() uint64 }); ok {
		counter(ch, descPubRefused, float64(pr.PublishesRefused()))
	}
	if f := c.m.fence; f != nil {
		s := f.Stats()
		counter(ch, descFenceRuns, float64(s.Runs))
		counter(ch, descFenceRepeats, float64(s.Repeats))
		counter(ch, descFenceStale, float64(s.Stale))
	}
	n := c.m.node.Load()
	if n == nil {
		if tr != nil {
			gauge(ch, descConnected, b2f(tr.State() == driver.TransportConnected))
		}
		return
	}
	if tr != nil {
		gauge(ch, descConnected, b2f(tr.State() == driver.TransportConnected))
	} else {
		gauge(ch, descConnected, b2f(n.TransportState() == driver.TransportConnected))
	}
	st := n.State()
	for s := service.StateNew; s <= service.StateStopped; s++ {
		gauge(ch, descNodeState, b2f(s == st), s.String())
	}
	gauge(ch, descEpoch, float64(n.Epoch()))
	gauge(ch, descLeaseExpired, b2f(n.LeaseExpired()))

	members := n.Members()
	gauge(ch, descRingMembers, float64(len(members)))
	gauge(ch, descRingShare, ownership(n))
	ch <- prometheus.MustNewConstMetric(descRingInfo, prometheus.GaugeValue, 1, n.Fingerprint().String())

	var up, down float64
	for _, r := range n.Heartbeats() {
		if r.BusDown > 0 {
			down++
		} else {
			up++
		}
		if r.Node != n.UUID() {
			gauge(ch, descHBAge, r.Age.Seconds(), r.Node)
		}
	}
	gauge(ch, descHBMembers, up, "up")
	gauge(ch, descHBMembers, down, "bus_down")

	ms := n.MembershipStats()
	counter(ch, descJoins, float64(ms.Joined))
	counter(ch, descLeaves, float64(ms.Left))
	counter(ch, descEvictions, float64(ms.Evicted))

	if now, bound, ok := n.ClusterTime(); ok {
		gauge(ch, descClockOffset, time.Until(now).Seconds())
		gauge(ch, descClockBound, bound.Seconds())
	}

	if b := n.Bus(); b != nil {
		s := b.Stats()
		gauge(ch, descPending, float64(s.Pending))
		gauge(ch, descRunning, float64(s.Running))
		gauge(ch, descQueued, float64(s.Queued))
		for _, o := range []struct {
			name string
			v    uint64
		}{
			{"rejected", s.Rejected}, {"late", s.Late}, {"late_reply", s.LateReplies}, {"released", s.Released},
			{"lost", s.Lost}, {"failed", s.Failed}, {"retried", s.Retried}, {"dead_lettered", s.DeadLettered},
		} {
			counter(ch, descBusEvents, float64(o.v), o.name)
		}
	}

	ds := n.DrainStats()
	counter(ch, descDrainQueues, float64(ds.Queues))
	counter(ch, descDrainMsgs, float64(ds.Moved), "moved")
	counter(ch, descDrainMsgs, float64(ds.Late), "late")
	counter(ch, descDrainMsgs, float64(ds.Dropped), "dropped")
}

// sampleKeys are fixed resource UUIDs spread over the key space; the
// share of them a node owns estimates its share of resources (standard
// error below 1.6 % with 1024 keys).
var sampleKeys = func() []string {
	r := rand.New(rand.NewPCG(0x636c6f7564627573, 0x6d657472696373)) // fixed: every node samples the same keys
	keys := make([]string, 1024)
	for i := range keys {
		hi, lo := r.Uint64(), r.Uint64()
		hi = hi&^0xf000 | 0x4000     // version 4
		lo = lo&^(0xc<<60) | 0x8<<60 // variant 10
		keys[i] = fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", hi>>32, hi>>16&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff)
	}
	return keys
}()

// ownership is the share of sampleKeys n owns on its ring.
func ownership(n *service.Node) float64 {
	id := n.UUID()
	owned := 0
	for _, k := range sampleKeys {
		if o, err := n.Owner(k); err == nil && o == id {
			owned++
		}
	}
	return float64(owned) / float64(len(sampleKeys))
}

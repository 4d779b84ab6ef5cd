package service

import (
	"sync/atomic"

	"github.com/cloudbus-go/cloudbus/heartbeat"
)

// MembershipStats counts the membership changes a node saw, in all its
// lives, for metrics.
type MembershipStats struct {
	// Joined counts members added to this node's ring.
	Joined uint64
	// Left counts members removed from this node's ring, for any reason
	// (a goodbye, a vanished record, an eviction).
	Left uint64
	// Evicted counts the nodes this node's monitor evicted: they stopped
	// beating or were cut off from the bus.
	Evicted uint64
}

// membershipCounters backs [Node.MembershipStats].
type membershipCounters struct {
	joined, left, evicted atomic.Uint64
}

// MembershipStats returns what this node saw of the membership, in all
// its lives. It does not block and is safe for concurrent use.
func (n *Node) MembershipStats() MembershipStats {
	return MembershipStats{
		Joined:  n.mstats.joined.Load(),
		Left:    n.mstats.left.Load(),
		Evicted: n.mstats.evicted.Load(),
	}
}

// Heartbeats returns the membership records as this node's heartbeat
// monitor last listed them (Age is as of that list), sorted by node; nil
// before the node joined. The caller owns the slice.
func (n *Node) Heartbeats() []heartbeat.Record {
	m := n.monitor.Load()
	if m == nil {
		return nil
	}
	return m.Members()
}

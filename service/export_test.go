package service

import (
	"context"
	"time"
)

// DropMemberOnStaleView removes member from n's ring as reconciling from
// a stale read of the store would (a read that started before the
// member's record was written), for tests.
func (n *Node) DropMemberOnStaleView(member string) {
	n.mu.Lock()
	e := n.members[member]
	n.mu.Unlock()
	n.memberLeft(member, e, "test: a stale view of the store", abandonCalls)
}

// RerouteOwn empties q, one of n's own queues, as n's leave does, for tests.
func (n *Node) RerouteOwn(ctx context.Context, q string) (int, error) {
	return n.rerouteOwn(ctx, n.Bus(), q)
}

// KickSweep asks n's sweep of absent nodes' queues to run now, for tests.
func (n *Node) KickSweep() { n.kickSweep() }

// MisreadClusterTime feeds c's clock two measurements saying the cluster
// time is off from this process's clock by off, as a client that
// believed a node which had just stepped its clock, for tests.
func (c *Client) MisreadClusterTime(off time.Duration) {
	for range 2 {
		now := time.Now()
		c.clock.sync.Sample(now, now, now.Add(off), 0)
	}
}

package service_test

import (
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

// TestForgedLifecycleEvents: lifecycle events are hints, the store is the
// truth. A NodeLeft for a live node (with a far-future epoch, and with its
// real epoch) removes it from no ring, and a replayed NodeJoined of a life
// that ended re-adds nothing: every ring copy agrees with the store within
// one reconcile interval (one beat interval), and the live node stays a
// member throughout.
func TestForgedLifecycleEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hb := heartbeat.TestConfig() // servicetest's timing
		c := servicetest.Start(t, servicetest.Options{Nodes: 3, Heartbeat: hb})
		c.WaitConverged(t, 10*hb.EvictAfter)

		// A life that ended: a fourth node joins, then leaves.
		gone := c.AddNode(t)
		goneEpoch := gone.Epoch()
		c.WaitConverged(t, 10*hb.EvictAfter)
		require.NoError(t, gone.Close())
		c.WaitGone(t, gone.UUID(), 10*hb.EvictAfter)
		c.WaitConverged(t, 10*hb.EvictAfter)

		victim := c.Node(2)
		sender := c.Node(0).Bus()
		want := c.LiveUUIDs()
		slices.Sort(want)
		ctx := t.Context()
		forged := []any{
			wire.NodeLeft{Node: victim.UUID(), Epoch: math.MaxInt64, Reason: wire.LeaveEvicted, By: c.Node(0).UUID()},
			wire.NodeLeft{Node: victim.UUID(), Epoch: victim.Epoch(), Reason: wire.LeaveEvicted, By: c.Node(1).UUID()},
			wire.NodeLeft{Node: victim.UUID(), Epoch: victim.Epoch(), Reason: wire.LeaveGoodbye},
			wire.NodeJoined{Node: gone.UUID(), Epoch: goneEpoch},
		}
		for _, ev := range forged {
			require.NoError(t, sender.Broadcast(ctx, ev))
		}
		start := time.Now()
		synctest.Wait() // every subscriber has handled every event
		agree := func() bool {
			for _, n := range c.Live() {
				if !slices.Equal(n.Members(), want) {
					return false
				}
			}
			return true
		}
		for _, n := range c.Live() {
			require.Contains(t, n.Members(), victim.UUID(), "node %s dropped the live node on a forged NodeLeft", n.UUID())
			require.NotContains(t, n.Members(), gone.UUID(), "node %s re-added a departed life on a replayed NodeJoined", n.UUID())
		}
		c.WaitFor(t, hb.Interval, "every ring agrees with the store within one reconcile interval", agree)
		t.Logf("rings agree %s after the forged events (virtual time)", time.Since(start))

		// Later reads of the store change nothing: the victim stays.
		time.Sleep(5 * hb.Interval)
		require.True(t, agree(), "rings drifted after the forged events")
	})
}

// TestStaleViewHeals: a member dropped from a ring on a stale view of the
// store (its record was written after the read began) comes back at the
// next reconciliation, although its life's tombstone says it left: the
// store holds its record, and the store is the truth.
func TestStaleViewHeals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hb := heartbeat.TestConfig()
		c := servicetest.Start(t, servicetest.Options{Nodes: 3, Heartbeat: hb})
		c.WaitConverged(t, 10*hb.EvictAfter)
		a, b := c.Node(0), c.Node(1)
		a.DropMemberOnStaleView(b.UUID())
		require.NotContains(t, a.Members(), b.UUID())
		start := time.Now()
		c.WaitFor(t, 4*hb.Interval, "the dropped live member is back in the ring", func() bool {
			return slices.Contains(a.Members(), b.UUID())
		})
		t.Logf("re-added %s after the drop (virtual time; two reads of the store)", time.Since(start))
		c.WaitConverged(t, hb.EvictAfter)
	})
}

package heartbeat_test

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
)

// phaseRuns is how many random phase assignments the timing tests try.
const phaseRuns = 25

// TestCrashedNodeIsEvictedInTime cuts a node off the store (it stops
// beating, no goodbye) and checks that exactly one peer evicts it within
// (EvictAfter, EvictAfter+Interval] of its last successful beat, the
// other peer reports Left one round later at most, and the node, once it
// reaches the store again, reports SelfEvicted and Run returns ErrEvicted.
func TestCrashedNodeIsEvictedInTime(t *testing.T) {
	cfg := heartbeat.TestConfig()
	H, E := cfg.Interval, cfg.EvictAfter
	var minDelay, maxDelay atomic.Int64
	minDelay.Store(int64(time.Hour))
	for i := range phaseRuns {
		t.Run(fmt.Sprintf("phases %d", i), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, cfg, memstore.Config{})
				a, b, x := c.start("", -1), c.start("", -1), c.start("", -1)
				settle(20*H + rand.N(H))

				mark := time.Now()
				c.s.SetUnreachable(x.id, true)
				last := x.m.LastBeat()
				sleepUntil(last.Add(E + H))

				var evictions []stamped
				var evictor, other *node
				for _, n := range []*node{a, b} {
					if ev := ofKind(n.events(mark, x.id), heartbeat.Evicted); len(ev) > 0 {
						evictions = append(evictions, ev...)
						evictor = n
					} else {
						other = n
					}
				}
				require.Len(t, evictions, 1, "exactly one peer must evict the crashed node within EvictAfter+Interval of its last beat")
				delay := evictions[0].at.Sub(last)
				assert.Greater(t, delay, E, "a node must not be evicted before its record is EvictAfter old")
				assert.LessOrEqual(t, delay, E+H, "a crashed node must be evicted within EvictAfter+Interval of its last beat")
				assert.NotContains(t, evictions[0].members, x.id, "Members seen by the listener already exclude the evicted node")
				minDelay.Store(min(minDelay.Load(), int64(delay)))
				maxDelay.Store(max(maxDelay.Load(), int64(delay)))

				settle(H)
				assert.Equal(t, []heartbeat.EventKind{heartbeat.Evicted}, kinds(evictor.events(mark)), "the evictor reports only Evicted")
				assert.Equal(t, []heartbeat.EventKind{heartbeat.Left}, kinds(other.events(mark)), "the other peer reports Left within one more round")
				left := other.events(mark)[0].at.Sub(last)
				assert.LessOrEqual(t, left, E+2*H, "the other peer must report Left within EvictAfter+2×Interval")
				assert.Empty(t, x.events(mark), "a node cut off from the store reports nothing")
				t.Logf("evicted %v after the last beat (bound (%v, %v]); the other peer saw Left after %v", delay, E, E+H, left)

				c.s.SetUnreachable(x.id, false)
				settle(H)
				returned, err := x.returned()
				require.True(t, returned, "Run of an evicted node must return once it reaches the store")
				require.ErrorIs(t, err, heartbeat.ErrEvicted)
				assert.Equal(t, []heartbeat.EventKind{heartbeat.SelfEvicted}, kinds(x.events(mark)), "an evicted node reports SelfEvicted")
				for _, n := range []*node{a, b} {
					assert.ElementsMatch(t, []string{a.id, b.id}, nodesOf(n.m.Members()))
				}
			})
		})
	}
	t.Logf("eviction delay after the last beat over %d phase assignments: min %v, max %v (bound (%v, %v])",
		phaseRuns, time.Duration(minDelay.Load()), time.Duration(maxDelay.Load()), E, E+H)
}

// TestOutageForEveryoneEvictsNobody cuts every node off the store for
// about 2×EvictAfter, then reconnects all but one: every record is stale
// by then, but no live node is evicted, because a monitor evicts only
// after its own beats have succeeded for three rounds, by which time
// every live node has beaten again. The node that stays away is evicted
// within EvictAfter+Interval of the store's return.
func TestOutageForEveryoneEvictsNobody(t *testing.T) {
	outageEvictsNobody(t, heartbeat.TestConfig(), nil)
}

// outageEvictsNobody is TestOutageForEveryoneEvictsNobody on cfg, with
// also(c, n) applied to every node as the outage begins.
func outageEvictsNobody(t *testing.T, cfg heartbeat.Config, also func(c *cluster, n *node)) {
	H, E := cfg.Interval, cfg.EvictAfter
	for i := range phaseRuns {
		t.Run(fmt.Sprintf("phases %d", i), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, cfg, memstore.Config{})
				var live []*node
				for range 4 {
					live = append(live, c.start("", -1))
				}
				gone := c.start("", -1)
				// Start and end the outage at random points of the
				// interval: an outage of whole intervals keeps the order
				// in which nodes beat and hides the hazard.
				settle(20*H + rand.N(H))
				mark := time.Now()
				for _, n := range append(live, gone) {
					c.s.SetUnreachable(n.id, true)
					if also != nil {
						also(c, n)
					}
				}
				settle(2*E + rand.N(H))
				back := time.Now()
				for _, n := range live {
					c.s.SetUnreachable(n.id, false)
				}
				settle(3 * E)
				var evictions []stamped
				for _, n := range live {
					evs := n.events(mark)
					assert.Len(t, n.events(mark, gone.id), len(evs), "no live node may be evicted after an outage every node saw")
					evictions = append(evictions, ofKind(evs, heartbeat.Evicted)...)
					returned, _ := n.returned()
					assert.False(t, returned, "every live monitor keeps running")
					assert.Len(t, n.m.Members(), len(live))
				}
				require.Len(t, evictions, 1, "the node that did not come back is evicted once")
				t.Logf("the node that stayed away was evicted %v after the store came back (bound [%v, %v])", evictions[0].at.Sub(back), 2*H, E+H)
				assert.LessOrEqual(t, evictions[0].at.Sub(back), E+H, "within EvictAfter+Interval of the store's return")
				assert.GreaterOrEqual(t, evictions[0].at.Sub(back), 2*H, "but not before the evictor's third successful round")
			})
		})
	}
}

// TestOutageRecoveryRace is the worst case for the rule "evict only if
// this round's and the previous round's beats succeeded": node j's tick
// falls just before the store comes back, and its beats are slow, so its
// first beat after the outage lands one Interval plus its latency after
// the return, later than i's second successful round. Requiring three
// successful rounds leaves a whole Interval of margin.
func TestOutageRecoveryRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeat.TestConfig() // H 50 ms, E 300 ms, OpTimeout 50 ms
		c := newCluster(t, cfg, memstore.Config{})
		t0 := time.Now()
		i := c.start("", 0)                   // ticks at t0 + 50k ms
		j := c.start("", 40*time.Millisecond) // ticks at t0 + 40 + 50k ms
		c.s.SetLatency(j.id, 20*time.Millisecond)
		// j's beat sent at 990 ms lands at 1010 and its List returns at
		// 1030; i's List at 1050 sees that beat. Then both lose the
		// store, so i's last view of j is j's last beat.
		sleepUntil(t0.Add(1030 * time.Millisecond))
		mark := time.Now()
		c.s.SetUnreachable(j.id, true)
		sleepUntil(t0.Add(1051 * time.Millisecond))
		c.s.SetUnreachable(i.id, true)
		// Back at 1645 ms: j's tick at 1640 failed, its next beat is sent
		// at 1690 and lands at 1710; i beats at 1650, 1700, 1750. With
		// two rounds i would evict j at 1700.
		sleepUntil(t0.Add(1645 * time.Millisecond))
		c.s.SetUnreachable(i.id, false)
		c.s.SetUnreachable(j.id, false)
		settle(3 * cfg.EvictAfter)
		assert.Empty(t, i.events(mark), "i must not evict j, whose first beat after the outage was slow")
		assert.Empty(t, j.events(mark))
		assert.Len(t, i.m.Members(), 2)
	})
}

// TestStoreClockJumpEvictsNobody jumps the store's clock forward by
// 10×EvictAfter: every record suddenly looks stale, but a monitor also
// needs to have seen a record unchanged for EvictAfter-Interval by its
// own clock, so nobody is evicted; a node that really stops afterwards
// still is, in time.
func TestStoreClockJumpEvictsNobody(t *testing.T) {
	cfg := heartbeat.TestConfig()
	H, E := cfg.Interval, cfg.EvictAfter
	synctest.Test(t, func(t *testing.T) {
		var offset atomic.Int64
		now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
		c := newCluster(t, cfg, memstore.Config{Now: now})
		a, b, x := c.start("", -1), c.start("", -1), c.start("", -1)
		settle(20 * H)
		mark := time.Now()
		offset.Store(int64(10 * E))
		settle(3 * E)
		for _, n := range []*node{a, b, x} {
			assert.Empty(t, n.events(mark), "a jump of the store's clock must not evict live nodes")
		}

		c.s.SetUnreachable(x.id, true)
		last := x.m.LastBeat()
		sleepUntil(last.Add(E + H))
		evictions := append(ofKind(a.events(mark), heartbeat.Evicted), ofKind(b.events(mark), heartbeat.Evicted)...)
		require.Len(t, evictions, 1, "a node that stops after the jump is still evicted within EvictAfter+Interval")
		assert.Equal(t, x.id, evictions[0].Record.Node)
	})
}

// TestBriefFailuresDoNotEvict cuts a node off for EvictAfter-2×Interval,
// less than the threshold: it is not evicted and keeps running.
func TestBriefFailuresDoNotEvict(t *testing.T) {
	cfg := heartbeat.TestConfig()
	H, E := cfg.Interval, cfg.EvictAfter
	for i := range phaseRuns {
		t.Run(fmt.Sprintf("phases %d", i), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, cfg, memstore.Config{})
				a, b, x := c.start("", -1), c.start("", -1), c.start("", -1)
				settle(20*H + rand.N(H))
				mark := time.Now()
				c.s.SetUnreachable(x.id, true)
				settle(E - 2*H)
				c.s.SetUnreachable(x.id, false)
				settle(3 * E)
				for _, n := range []*node{a, b, x} {
					assert.Empty(t, n.events(mark), "a node that missed fewer beats than EvictAfter allows is not evicted")
				}
				returned, _ := x.returned()
				assert.False(t, returned)
			})
		})
	}
}

// TestSlowNodeIsNotEvicted gives a node store calls that take 80% of
// OpTimeout: its rounds overrun the interval, but its beats land and it is
// never evicted.
func TestSlowNodeIsNotEvicted(t *testing.T) {
	cfg := heartbeat.TestConfig()
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, cfg, memstore.Config{})
		a, b, x := c.start("", -1), c.start("", -1), c.start("", -1)
		settle(20 * cfg.Interval)
		mark := time.Now()
		c.s.SetLatency(x.id, cfg.OpTimeout*8/10)
		settle(100 * cfg.Interval)
		for _, n := range []*node{a, b, x} {
			assert.Empty(t, n.events(mark), "a slow node whose beats land in time is never evicted")
		}
	})
}

// TestOpTimeoutBoundsCalls makes a node's store calls slower than
// OpTimeout: each call is abandoned after OpTimeout, so the node stops
// beating and is evicted in time, its Run never hangs, and it stops at
// once when its context ends even in the middle of a call.
func TestOpTimeoutBoundsCalls(t *testing.T) {
	cfg := heartbeat.TestConfig()
	H, E := cfg.Interval, cfg.EvictAfter
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, cfg, memstore.Config{})
		a, b, x := c.start("", -1), c.start("", -1), c.start("", -1)
		settle(20 * H)
		mark := time.Now()
		c.s.SetLatency(x.id, time.Hour)
		last := x.m.LastBeat()
		sleepUntil(last.Add(E + H))
		evictions := append(ofKind(a.events(mark), heartbeat.Evicted), ofKind(b.events(mark), heartbeat.Evicted)...)
		require.Len(t, evictions, 1, "a node whose calls time out is evicted within EvictAfter+Interval")
		returned, _ := x.returned()
		require.False(t, returned, "Run keeps going while its calls time out")

		settle(H / 3) // likely in the middle of a call
		x.cancel()
		synctest.Wait()
		returned, err := x.returned()
		require.True(t, returned, "Run returns as soon as its context ends, even during a store call")
		require.NoError(t, err)
	})
}

// TestStalledMonitorRestartsItsStreak stalls a monitor in its listener
// while the store goes away and comes back. When it resumes, its beat
// succeeds and its previous beats had succeeded too, but it cannot vouch
// for the store while it was stalled: it must wait for fresh successful
// rounds before evicting, by which time the other node has beaten again.
func TestStalledMonitorRestartsItsStreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeat.TestConfig() // H 50 ms, E 300 ms
		c := newCluster(t, cfg, memstore.Config{})
		t0 := time.Now()
		release := make(chan struct{})
		var stalled atomic.Bool
		z := message.NewUUID() // a record that appears at 1010 ms
		id := message.NewUUID()
		i := &node{id: id, done: make(chan error, 1)}
		i.onEvent = func(e heartbeat.Event) {
			if e.Kind == heartbeat.Joined && e.Record.Node == z {
				stalled.Store(true)
				<-release
			}
		}
		c.run(i, c.s.For(id), 0)              // ticks at t0 + 50k ms
		j := c.start("", 25*time.Millisecond) // ticks at t0 + 25 + 50k ms
		settle(time.Until(t0.Add(1010 * time.Millisecond)))
		// A third record appears; i reports it at 1050, after listing j's
		// beat of 1025, and its listener stalls.
		_, err := c.s.Register(t.Context(), z)
		require.NoError(t, err)
		sleepUntil(t0.Add(1050 * time.Millisecond))
		require.True(t, stalled.Load())
		mark := time.Now()
		c.s.SetUnreachable(j.id, true)
		// The store is back for j at 1680 (its tick at 1675 failed, the
		// next is at 1725); i resumes at 1690 with a successful beat.
		sleepUntil(t0.Add(1680 * time.Millisecond))
		c.s.SetUnreachable(j.id, false)
		sleepUntil(t0.Add(1690 * time.Millisecond))
		close(release)
		settle(3 * cfg.EvictAfter)
		assert.Empty(t, i.events(mark, j.id), "a monitor that stalled must not evict on its first round after the stall")
		assert.Empty(t, j.events(mark, i.id))
		for _, n := range []*node{i, j} {
			returned, _ := n.returned()
			assert.False(t, returned, "both nodes keep running")
		}
	})
}

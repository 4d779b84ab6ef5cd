package servicetest_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLive: Live and LiveUUIDs leave out every node that is killed, cut
// off from the heartbeat store, fenced or not serving, and keep the nodes
// whose faults leave them beating.
func TestLive(t *testing.T) {
	t.Run("a killed node is out at once and for good", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := start(t, 3, servicetest.Options{})
			victim := c.Node(1).UUID()
			c.Kill(victim)
			assert.NotContains(t, c.LiveUUIDs(), victim)
			assert.Len(t, c.Live(), 2)
			c.ResumeHeartbeat(victim) // does not revive a killed node
			time.Sleep(3 * hb.EvictAfter)
			assert.NotContains(t, c.LiveUUIDs(), victim, "a killed node never comes back")
			assert.True(t, c.Gone(victim))
		})
	})

	t.Run("a cut-off node is out at once, though still in every ring", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := start(t, 3, servicetest.Options{})
			victim := c.Node(1)
			c.StopHeartbeat(victim.UUID())
			assert.NotContains(t, c.LiveUUIDs(), victim.UUID())
			assert.Equal(t, service.StateServing, victim.State(), "it still runs")
			assert.False(t, victim.LeaseExpired(), "not yet fenced: Live leaves it out because it is cut off")
			assert.True(t, inEveryLiveRing(c, victim.UUID()), "peers still hold it")

			c.ResumeHeartbeat(victim.UUID()) // before the lease ran out
			assert.Contains(t, c.LiveUUIDs(), victim.UUID(), "back at once: it serves, unfenced")
			epoch := victim.Epoch()
			time.Sleep(3 * hb.EvictAfter)
			assert.Equal(t, epoch, victim.Epoch(), "a short cut evicts nobody")
			assert.Contains(t, c.LiveUUIDs(), victim.UUID())
		})
	})

	t.Run("an evicted node counts again once it rejoined", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := start(t, 3, servicetest.Options{})
			victim := c.Node(2)
			epoch := victim.Epoch()
			c.StopHeartbeat(victim.UUID())
			c.WaitGone(t, victim.UUID(), hb.EvictAfter+2*hb.Interval)
			c.ResumeHeartbeat(victim.UUID())
			assert.NotContains(t, c.LiveUUIDs(), victim.UUID(), "fenced until it learns it was evicted")
			c.WaitFor(t, 4*hb.Interval, "the evicted node is live again", func() bool {
				return len(c.Live()) == 3
			})
			assert.NotEqual(t, epoch, victim.Epoch(), "it rejoined with a new epoch")
			assert.Equal(t, service.StateServing, victim.State())
		})
	})

	t.Run("a fenced node is out until a beat lands", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := start(t, 3, servicetest.Options{})
			victim := c.Node(0)
			epoch := victim.Epoch()
			// Slow store calls time out: the node's beats fail, although the
			// cluster did not cut it off.
			c.Store().SetLatency(victim.UUID(), 2*hb.OpTimeout)
			c.WaitFor(t, hb.EvictAfter, "the node fences itself", victim.LeaseExpired)
			assert.NotContains(t, c.LiveUUIDs(), victim.UUID())
			assert.False(t, c.Converged(), "its peers still hold it")

			c.Store().SetLatency(victim.UUID(), 0) // before peers may evict it
			c.WaitFor(t, 2*hb.Interval, "a beat lands and the fence opens", func() bool { return !victim.LeaseExpired() })
			assert.Contains(t, c.LiveUUIDs(), victim.UUID())
			assert.Equal(t, epoch, victim.Epoch(), "it was never evicted")
			assert.True(t, c.Converged())
		})
	})

	t.Run("a stopped node is out", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := start(t, 3, servicetest.Options{})
			victim := c.Node(1).UUID()
			require.NoError(t, c.Stop(victim))
			assert.NotContains(t, c.LiveUUIDs(), victim)
			assert.True(t, c.Gone(victim), "every peer dropped it before Stop returned")
			assert.True(t, c.Converged())
		})
	})

	t.Run("a dropped node stays live and in every ring", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := start(t, 3, servicetest.Options{})
			dropped := c.Node(0).UUID()
			c.Drop(dropped, true)
			time.Sleep(3 * hb.EvictAfter) // it goes on beating: nobody is evicted
			assert.Len(t, c.Live(), 3)
			assert.True(t, inEveryLiveRing(c, dropped))
			assert.True(t, c.Converged())
			assert.False(t, c.Gone(dropped))
			c.Drop(dropped, false)
		})
	})

	t.Run("a partitioned node is evicted as a zombie and rejoins once healed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := start(t, 3, servicetest.Options{})
			victim := c.Node(1)
			epoch := victim.Epoch()
			cut := time.Now()
			c.Partition(victim.UUID(), true)
			assert.NotContains(t, c.LiveUUIDs(), victim.UUID(), "not live from the cut")
			c.WaitGone(t, victim.UUID(), 2*hb.EvictAfter)
			took := time.Since(cut)
			t.Logf("a node cut off from the bus left every ring %v after the cut (lease %v)", took, hb.Lease)
			assert.LessOrEqual(t, took, hb.Lease+3*hb.Interval)
			c.WaitConverged(t, time.Second)
			c.Partition(victim.UUID(), false)
			c.WaitFor(t, 2*hb.EvictAfter, "the healed node rejoins with a new epoch", func() bool {
				return victim.State() == service.StateServing && victim.Epoch() != epoch
			})
			c.WaitConverged(t, time.Second)
			assert.True(t, inEveryLiveRing(c, victim.UUID()))
		})
	})
}

// TestConvergedAfterStopHeartbeat is the sequence of the package
// documentation: after StopHeartbeat the rings disagree with the live
// nodes until a peer evicts the node; WaitGone then WaitConverged return
// once that happened; Owner never asks the stale ring of the cut-off
// node; and ResumeHeartbeat brings the node back into every ring.
func TestConvergedAfterStopHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := start(t, 3, servicetest.Options{})
		victim := c.Node(0).UUID() // the first node: its stale ring must not answer Owner
		require.True(t, c.Converged())
		resources := make([]string, 200)
		for i := range resources {
			resources[i] = message.NewUUID()
		}

		stopped := time.Now()
		c.StopHeartbeat(victim)
		assert.False(t, c.Converged(), "peers still hold the cut-off node")
		assert.False(t, c.Gone(victim))

		c.WaitGone(t, victim, hb.EvictAfter+2*hb.Interval)
		took := time.Since(stopped)
		assert.Greater(t, took, hb.EvictAfter-hb.Interval, "no eviction before the threshold")
		assert.LessOrEqual(t, took, hb.EvictAfter+hb.Interval, "evicted within threshold + one interval")
		assert.True(t, c.Converged(), "once it is gone, the survivors' rings hold exactly the survivors")
		c.WaitConverged(t, time.Millisecond)
		assert.Contains(t, c.Node(0).Members(), victim, "the cut-off node's own ring is stale, and does not count")

		survivor := c.Node(1)
		for _, res := range resources {
			want, err := survivor.Owner(res)
			require.NoError(t, err)
			require.Equal(t, want, c.Owner(res), "Owner answers from a live node's ring")
			require.NotEqual(t, victim, c.Owner(res))
		}

		c.ResumeHeartbeat(victim)
		c.WaitFor(t, 4*hb.Interval, "the node rejoined", func() bool { return len(c.Live()) == 3 })
		c.WaitConverged(t, hb.Interval)
		assert.True(t, inEveryLiveRing(c, victim))
		owners := map[string]bool{}
		for _, res := range resources {
			owners[c.Owner(res)] = true
		}
		assert.True(t, owners[victim], "it owns resources again")
	})
}

// TestConvergedWithNoRejoin: with NoRejoin, the evicted node stops for
// good once it learns of its eviction, and the survivors stay converged.
func TestConvergedWithNoRejoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := start(t, 3, servicetest.Options{NoRejoin: true})
		victim := c.Node(2)
		c.StopHeartbeat(victim.UUID())
		c.WaitGone(t, victim.UUID(), hb.EvictAfter+2*hb.Interval)
		c.WaitConverged(t, time.Millisecond)
		c.ResumeHeartbeat(victim.UUID())
		select {
		case <-victim.Done():
		case <-time.After(4 * hb.Interval):
			t.Fatal("the evicted node did not stop")
		}
		assert.Equal(t, service.StateStopped, victim.State())
		assert.Len(t, c.Live(), 2)
		assert.True(t, c.Converged())
	})
}

// TestWaits: the waits return once their condition holds, and say what
// they waited for when they give up.
func TestWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := start(t, 3, servicetest.Options{})
		healthy, victim := c.Node(0).UUID(), c.Node(1).UUID()

		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		err := c.AwaitGone(ctx, healthy)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, "no ring holds node "+healthy)

		msg := fails(t, func(tb testing.TB) { c.WaitGone(tb, healthy, 10*time.Millisecond) })
		assert.Contains(t, msg, "not within 10ms: no ring holds node "+healthy)
		assert.Contains(t, msg, "live true", "the failure lists the nodes and their rings")

		c.Kill(victim)
		msg = fails(t, func(tb testing.TB) { c.WaitConverged(tb, 10*time.Millisecond) })
		assert.Contains(t, msg, "every ring copy holds exactly the live nodes")
		assert.Contains(t, msg, victim+" (serving, killed")

		assert.Empty(t, fails(t, func(tb testing.TB) { c.WaitGone(tb, victim, hb.EvictAfter+2*hb.Interval) }))
		assert.Empty(t, fails(t, func(tb testing.TB) { c.WaitConverged(tb, time.Millisecond) }))
		require.NoError(t, c.AwaitConverged(t.Context()))
	})
}

// TestAddNode: a node added later joins every ring.
func TestAddNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := start(t, 2, servicetest.Options{})
		n := c.AddNode(t)
		c.WaitConverged(t, hb.Interval)
		assert.True(t, inEveryLiveRing(c, n.UUID()))
		assert.Same(t, n, c.NodeByUUID(n.UUID()))
		assert.Same(t, n, c.Node(2))
		assert.Nil(t, c.NodeByUUID(message.NewUUID()))
		assert.Panics(t, func() { c.StopHeartbeat(message.NewUUID()) }, "an unknown node is a bug in the test")
	})
}

// TestKillEndsTheSession: a killed node's database session ends with it,
// so a peer evicts it once its beat is a quarter Interval late, long
// before EvictAfter; with Options.NoSessionLocks only the beat rule
// evicts it. A node cut off from the store (StopHeartbeat) keeps its
// session: TestConvergedAfterStopHeartbeat shows it is not evicted
// before the threshold.
func TestKillEndsTheSession(t *testing.T) {
	for _, c := range []struct {
		name     string
		noLocks  bool
		min, max time.Duration
	}{
		{"session locks", false, 0, hb.Interval + hb.Interval/4 + 2*hb.Interval},
		{"no session locks", true, hb.EvictAfter - hb.Interval, hb.EvictAfter + 2*hb.Interval},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cl := start(t, 3, servicetest.Options{NoSessionLocks: c.noLocks})
				// Every node saw its peers' locks held: a round after
				// their third healthy beat.
				time.Sleep(5 * hb.Interval)
				victim := cl.Node(1).UUID()
				killed := time.Now()
				cl.Kill(victim)
				cl.WaitGone(t, victim, 2*hb.EvictAfter)
				took := time.Since(killed)
				t.Logf("%s: a killed node left every ring %v after the kill (Interval %v, EvictAfter %v)", c.name, took, hb.Interval, hb.EvictAfter)
				assert.GreaterOrEqual(t, took, c.min)
				assert.LessOrEqual(t, took, c.max)
				cl.WaitConverged(t, time.Second)
			})
		})
	}
}

// TestPause: a paused node is not live and holds the handler of a
// message that passed its checks; its peers evict it; unpaused, the held
// handler runs and answers, and the node rejoins with a new epoch.
func TestPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := start(t, 3, servicetest.Options{})
		victim := c.Node(1)
		epoch := victim.Epoch()
		res := message.NewUUID()
		for c.Owner(res) != victim.UUID() {
			res = message.NewUUID()
		}
		c.Pause(victim.UUID(), true)
		assert.NotContains(t, c.LiveUUIDs(), victim.UUID())
		got := make(chan error, 1)
		go func() {
			_, err := bus.Call[Here](t.Context(), victim.Bus(), victim.Bus().LocalID("where"), Where{Resource: res},
				bus.WithResource(res), bus.WithTimeout(10*time.Second))
			got <- err
		}()
		c.WaitGone(t, victim.UUID(), hb.EvictAfter+2*hb.Interval)
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("the handler ran while its node was paused: %v", err)
		default:
		}
		c.Pause(victim.UUID(), false)
		require.NoError(t, <-got, "the held handler runs once unpaused")
		c.WaitFor(t, 10*hb.EvictAfter, "the node rejoins", func() bool {
			return victim.Epoch() != epoch && slices.Contains(c.LiveUUIDs(), victim.UUID())
		})
	})
}

// TestClockOffset: a node's clock steps an hour ahead; its estimate of
// the cluster time follows once two readings of the store's clock
// confirm the step, within its bound, and it stays live; put right, it
// follows back.
func TestClockOffset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := start(t, 3, servicetest.Options{})
		n := c.Node(1)
		within := func(what string) {
			t.Helper()
			c.WaitFor(t, 2*4*hb.Interval, what, func() bool { // two readings of the store's clock, one every fourth round
				now, bound, ok := n.ClusterTime()
				d := time.Until(now) // the store's clock is the bubble's
				return ok && d <= bound && -d <= bound
			})
		}
		within("the cluster time before the step")
		c.ClockOffset(n.UUID(), time.Hour)
		assert.WithinDuration(t, time.Now().Add(time.Hour), n.Heartbeat().Now(), time.Millisecond, "the node's clock reads an hour ahead")
		within("the cluster time an hour after the step")
		c.ClockOffset(n.UUID(), 0)
		within("the cluster time once the clock is put right")
		assert.Contains(t, c.LiveUUIDs(), n.UUID())
	})
}

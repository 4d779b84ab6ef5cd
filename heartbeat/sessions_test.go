package heartbeat_test

import (
	"context"
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
)

// sessionConfig is TestConfig with session locks.
func sessionConfig() heartbeat.Config {
	cfg := heartbeat.TestConfig()
	cfg.SessionLocks = true
	return cfg
}

// crash ends x as a killed process: it stops beating (cut off from the
// store) and the store ends its session.
func (c *cluster) crash(x *node) {
	c.s.SetUnreachable(x.id, true)
	c.s.EndSession(x.id)
}

// TestDeadSessionIsEvictedFast: a node whose process dies (no beats, its
// session ended) is evicted by exactly one peer as soon as its beat is a
// quarter Interval late (1.25×Interval after its last beat, plus a 5 ms
// margin; EvictAfter is 6 Intervals): each peer tests the lock of a peer
// whose beat falls due before its own next round at that moment.
func TestDeadSessionIsEvictedFast(t *testing.T) {
	cfg := sessionConfig()
	H, E := cfg.Interval, cfg.EvictAfter
	suspect := H + H/4
	var minDelay, maxDelay atomic.Int64
	minDelay.Store(int64(time.Hour))
	for i := range phaseRuns {
		t.Run(fmt.Sprintf("phases %d", i), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, cfg, memstore.Config{})
				a, b, x := c.start("", -1), c.start("", -1), c.start("", -1)
				settle(20*H + rand.N(H))
				mark := time.Now()
				last := x.m.LastBeat()
				c.crash(x)
				sleepUntil(last.Add(suspect + 2*H))

				var evictions []stamped
				for _, n := range []*node{a, b} {
					evictions = append(evictions, ofKind(n.events(mark, x.id), heartbeat.Evicted)...)
				}
				require.Len(t, evictions, 1, "exactly one peer evicts the dead node")
				delay := evictions[0].at.Sub(last)
				assert.Greater(t, delay, suspect, "not before its beat is a quarter Interval late")
				assert.LessOrEqual(t, delay, suspect+10*time.Millisecond, "as soon as its beat is late")
				assert.Less(t, delay, E, "well before EvictAfter")
				minDelay.Store(min(minDelay.Load(), int64(delay)))
				maxDelay.Store(max(maxDelay.Load(), int64(delay)))
				for _, n := range []*node{a, b} {
					assert.ElementsMatch(t, []string{a.id, b.id}, nodesOf(n.m.Members()))
				}
			})
		})
	}
	t.Logf("a dead session's node evicted %v to %v after its last beat over %d phase assignments (EvictAfter %v)",
		time.Duration(minDelay.Load()), time.Duration(maxDelay.Load()), phaseRuns, E)
}

// TestFrozenSessionIsLeftToTheBeats: a node that stops beating but keeps
// its session (frozen, or cut off from the store: the database keeps the
// session, and its lock) is evicted by the beat rule only, after
// EvictAfter.
func TestFrozenSessionIsLeftToTheBeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, sessionConfig(), memstore.Config{})
		a, b, x := c.start("", -1), c.start("", -1), c.start("", -1)
		c.evictedByTheBeatRule(t, a, b, x, func() { c.s.SetUnreachable(x.id, true) }, "the session lives")
	})
}

// TestResetSessionIsTakenAgain: a live node whose session ends (a reset
// connection) while it keeps beating is not evicted, and holds its lock
// again within a round.
func TestResetSessionIsTakenAgain(t *testing.T) {
	cfg := sessionConfig()
	H := cfg.Interval
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, cfg, memstore.Config{})
		a, b, x := c.start("", -1), c.start("", -1), c.start("", -1)
		settle(20*H + rand.N(H))
		mark := time.Now()
		for range 5 {
			c.s.EndSession(x.id)
			free, err := c.s.SessionFree(t.Context(), x.id)
			require.NoError(t, err)
			require.True(t, free)
			settle(H + H/10)
			free, err = c.s.SessionFree(t.Context(), x.id)
			require.NoError(t, err)
			assert.False(t, free, "the node holds its lock again within a round")
			settle(3 * H)
		}
		for _, n := range []*node{a, b, x} {
			assert.Empty(t, n.events(mark), "a reset session evicts nobody")
		}
	})
}

// TestOutageEndingEverySessionEvictsNobody: the store is cut off from
// every node and every session ends (a database restart); when it comes
// back, no live node is evicted: each takes its lock again in its first
// round, before any monitor's three healthy rounds allow an eviction.
// The node that stays away is evicted fast once they are.
func TestOutageEndingEverySessionEvictsNobody(t *testing.T) {
	outageEvictsNobody(t, sessionConfig(), func(c *cluster, n *node) { c.s.EndSession(n.id) })
}

// TestNodeWithoutLockIsLeftToTheBeats: a peer that never held a session
// lock (SessionLocks off, or an older version) is evicted by the beat
// rule only: a free lock proves nothing of a node that never took it.
func TestNodeWithoutLockIsLeftToTheBeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, sessionConfig(), memstore.Config{})
		a, b := c.start("", -1), c.start("", -1)
		old := &cluster{t: t, s: c.s, cfg: heartbeat.TestConfig()}
		x := old.start("", -1)
		c.evictedByTheBeatRule(t, a, b, x, func() { c.crash(x) }, "a free lock proves nothing of a node that never held it")
	})
}

// TestSecondProcessAsTheSameNodeCannotJoin: while a node holds its lock,
// a second monitor for the same node fails to join with ErrSessionHeld;
// after Leave it joins.
func TestSecondProcessAsTheSameNodeCannotJoin(t *testing.T) {
	cfg := sessionConfig()
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, cfg, memstore.Config{})
		x := c.start("", -1)
		m2, err := heartbeat.NewMonitor(c.s.For(x.id), x.id, cfg, nil, nil)
		require.NoError(t, err)
		_, _, err = m2.Join(t.Context())
		require.ErrorIs(t, err, heartbeat.ErrSessionHeld)
		require.NoError(t, x.m.Leave(t.Context()))
		free, err := c.s.SessionFree(t.Context(), x.id)
		require.NoError(t, err)
		assert.True(t, free, "Leave releases the lock")
		m3, err := heartbeat.NewMonitor(c.s.For(x.id), x.id, cfg, nil, nil)
		require.NoError(t, err)
		_, _, err = m3.Join(t.Context())
		require.NoError(t, err)
		require.NoError(t, m3.Leave(t.Context()))
	})
}

// TestConfirmDeadVetoesTheFastPath: with Config.ConfirmDead reporting a
// node alive (its consumers still on the broker: a live node whose
// database connection was reset, its beat late), a free session lock
// evicts nobody; the beat rule still does, after EvictAfter.
func TestConfirmDeadVetoesTheFastPath(t *testing.T) {
	cfg := sessionConfig()
	var asked atomic.Int64
	cfg.ConfirmDead = func(context.Context, string) (bool, error) {
		asked.Add(1)
		return false, nil
	}
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, cfg, memstore.Config{})
		a, b, x := c.start("", -1), c.start("", -1), c.start("", -1)
		c.evictedByTheBeatRule(t, a, b, x, func() { c.crash(x) }, "the node is not confirmed dead")
		assert.Positive(t, asked.Load(), "ConfirmDead was asked")
	})
}

// evictedByTheBeatRule runs fault on x, a node of c whose peers are a
// and b, and checks that neither evicts it before its record is
// EvictAfter old, and that one does within EvictAfter+Interval: the fast
// path did not fire (why says why it must not).
func (c *cluster) evictedByTheBeatRule(t *testing.T, a, b, x *node, fault func(), why string) {
	t.Helper()
	H, E := c.cfg.Interval, c.cfg.EvictAfter
	settle(20*H + rand.N(H))
	mark := time.Now()
	last := x.m.LastBeat()
	fault()
	sleepUntil(last.Add(E))
	for _, n := range []*node{a, b} {
		assert.Empty(t, n.events(mark, x.id), "no eviction before EvictAfter: %s", why)
	}
	sleepUntil(last.Add(E + H))
	var evictions []stamped
	for _, n := range []*node{a, b} {
		evictions = append(evictions, ofKind(n.events(mark, x.id), heartbeat.Evicted)...)
	}
	require.Len(t, evictions, 1, "evicted by the beat rule")
	assert.Greater(t, evictions[0].at.Sub(last), E)
}

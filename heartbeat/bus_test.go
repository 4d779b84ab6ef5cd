package heartbeat_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
)

// TestZombieIsEvicted: a node that keeps beating but reports its bus
// down (a zombie: nothing reaches it) is evicted by a peer whose bus is
// up, BusDownAfter after its first down beat plus at most two intervals,
// and learns it at its next beat.
func TestZombieIsEvicted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeat.TestConfig()
		c := newCluster(t, cfg, memstore.Config{})
		a, b, z := c.start("", -1), c.start("", -1), c.start("", -1)
		settle(10 * cfg.Interval)
		cut := time.Now()
		z.m.SetBusUp(false)
		settle(cfg.Lease + 4*cfg.Interval)
		var evictions []stamped
		for _, n := range []*node{a, b} {
			evictions = append(evictions, ofKind(n.events(cut, z.id), heartbeat.Evicted)...)
			assert.NotContains(t, nodesOf(n.m.Members()), z.id)
		}
		require.Len(t, evictions, 1, "exactly one peer evicts the zombie")
		took := evictions[0].at.Sub(cut)
		t.Logf("a node cut off from the bus was evicted %v after it lost the bus (BusDownAfter %v, Interval %v)", took, cfg.Lease, cfg.Interval)
		assert.Greater(t, took, cfg.Lease)
		assert.LessOrEqual(t, took, cfg.Lease+2*cfg.Interval)
		assert.NotEmpty(t, ofKind(z.events(cut), heartbeat.SelfEvicted), "the zombie learns it was evicted")
	})
}

// TestBusOutageForEveryoneEvictsNobody: when every node loses the bus,
// nobody evicts anybody for it; when they come back one after another,
// spread over more than an eviction threshold, the first back waits
// BusSettle before it evicts for the bus, and by then the others report
// their bus up again. A node that does not come back is evicted.
func TestBusOutageForEveryoneEvictsNobody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeat.TestConfig()
		c := newCluster(t, cfg, memstore.Config{})
		var nodes []*node
		for range 4 {
			nodes = append(nodes, c.start("", -1))
		}
		settle(10 * cfg.Interval)
		mark := time.Now()
		for _, n := range nodes {
			n.m.SetBusUp(false)
		}
		settle(10 * cfg.EvictAfter)
		for _, n := range nodes {
			assert.Empty(t, n.events(mark), "nobody evicts while every bus is down")
		}
		// They come back over 1.5 eviction thresholds (reconnect backoff);
		// the last never does.
		for _, n := range nodes[:3] {
			n.m.SetBusUp(true)
			settle(cfg.EvictAfter / 2)
		}
		back := time.Now()
		firstBack := back.Add(-3 * cfg.EvictAfter / 2)
		busSettle := 2 * cfg.EvictAfter // the default
		settle(busSettle + 3*cfg.Interval)
		var evicted []stamped
		for _, n := range nodes[:3] {
			for _, e := range n.events(mark) {
				assert.Equal(t, nodes[3].id, e.Record.Node, "only the node whose bus stayed down leaves: %v", e)
			}
			evicted = append(evicted, ofKind(n.events(mark), heartbeat.Evicted)...)
		}
		require.Len(t, evicted, 1, "the node whose bus stayed down is evicted once")
		assert.GreaterOrEqual(t, evicted[0].at.Sub(firstBack), busSettle, "not before the first back waited BusSettle")
		t.Logf("the node whose bus stayed down was evicted %v after the first node's bus came back (BusSettle %v)", evicted[0].at.Sub(firstBack), busSettle)
	})
}

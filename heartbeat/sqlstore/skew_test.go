package sqlstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
)

// TestSkewedNodeClocks runs three monitors whose clocks are 10 minutes
// behind, on time, and 10 minutes ahead (injected with Config.Now) on a
// real database: ages come from the database's clock, so nobody is
// evicted, and a node that really stops beating is still evicted in time.
func TestSkewedNodeClocks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", sqliteURL}, {"postgres", testenv.PostgresDSN}, {"mysql", testenv.MySQLDSN}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := c.url(t)
			table := randomTable()
			t.Cleanup(func() { // runs last: after the stores closed
				ctx, cancel := cleanupCtx()
				defer cancel()
				s, err := sqlstore.Open(ctx, sqlstore.Config{URL: url, Table: table})
				if assert.NoError(t, err) {
					assert.NoError(t, s.Drop(ctx))
					assert.NoError(t, s.Close())
				}
			})
			base := heartbeat.Config{Interval: 100 * time.Millisecond, Lease: 400 * time.Millisecond, EvictAfter: 600 * time.Millisecond, OpTimeout: time.Second}
			var mu sync.Mutex
			var evicted []string
			type node struct {
				m      *heartbeat.Monitor
				cancel context.CancelFunc
				done   chan error
			}
			var nodes []*node
			for _, skew := range []time.Duration{-10 * time.Minute, 0, 10 * time.Minute} {
				cfg := base
				cfg.Now = func() time.Time { return time.Now().Add(skew) }
				store := open(t, sqlstore.Config{URL: url, Table: table})
				id := message.NewUUID()
				m, err := heartbeat.NewMonitor(store, id, cfg, heartbeat.ListenerFunc(func(e heartbeat.Event) {
					if e.Kind == heartbeat.Evicted || e.Kind == heartbeat.Left || e.Kind == heartbeat.SelfEvicted {
						mu.Lock()
						evicted = append(evicted, e.String())
						mu.Unlock()
					}
				}), nil)
				require.NoError(t, err)
				_, _, err = m.Join(t.Context())
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(t.Context())
				n := &node{m: m, cancel: cancel, done: make(chan error)}
				go func() {
					defer close(n.done)
					_ = m.Run(ctx)
				}()
				nodes = append(nodes, n)
			}
			t.Cleanup(func() {
				for _, n := range nodes {
					n.cancel()
					<-n.done
					_ = n.m.Leave(context.Background())
				}
			})
			// Ten eviction thresholds of skewed clocks: nobody evicted.
			deadline := time.Now().Add(10 * base.EvictAfter)
			for time.Now().Before(deadline) {
				for _, n := range nodes {
					require.False(t, n.m.LeaseExpired(), "a beating node must never be fenced, whatever its clock says")
				}
				time.Sleep(base.Interval)
			}
			mu.Lock()
			assert.Empty(t, evicted, "skewed node clocks must not evict anyone")
			mu.Unlock()
			for _, n := range nodes {
				assert.Len(t, n.m.Members(), 3)
			}

			// The skewed-ahead node dies: it is still evicted in time.
			victim := nodes[2]
			victim.cancel()
			<-victim.done
			died := time.Now()
			for {
				mu.Lock()
				n := len(evicted)
				mu.Unlock()
				if n >= 2 { // one Evicted and one Left, by the two peers
					break
				}
				require.Less(t, time.Since(died), 5*base.EvictAfter, "the dead node is evicted in time")
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("%s: no false eviction over %s with clocks ±10 min off; the dead node evicted after %s",
				c.name, 10*base.EvictAfter, time.Since(died).Round(time.Millisecond))
		})
	}
}

package servicetest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/heartbeat/sqlstore"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

// envs records the Env each node's services were given, by node index.
type envs struct {
	mu sync.Mutex
	m  map[int]nodekit.Env
}

func (e *envs) services(i int, env nodekit.Env) []service.Service {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[int]nodekit.Env{}
	}
	e.m[i] = env
	return nil
}

func (e *envs) get(i int) nodekit.Env {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m[i]
}

// TestSQLEnv: on SQL, each node's services get their node's pool, fence
// and store, the cluster's table prefix and timing; the store is the
// node's own view, cut off by StopHeartbeat with ErrUnreachable.
func TestSQLEnv(t *testing.T) {
	onEachDatabase(t, func(t *testing.T, db string) {
		var e envs
		c := servicetest.Start(t, servicetest.Options{Nodes: 2, Database: db, Services: e.services})
		info := c.Database()
		assert.Nil(t, c.Store(), "no in-memory store on SQL")
		require.NotNil(t, c.DB())
		hb := sqlHB.WithDefaults()
		for i := range 2 {
			env := e.get(i)
			assert.Equal(t, c.Node(i).UUID(), env.Node)
			require.NotNil(t, env.DB)
			require.NoError(t, env.DB.PingContext(t.Context()))
			assert.Equal(t, info.Dialect, env.Dialect)
			assert.Equal(t, info.Tables, env.Tables)
			require.NotNil(t, env.Fence)
			fc := env.Fence.Config()
			assert.Equal(t, info.Tables+"_fence", fc.Table)
			assert.Equal(t, info.HeartbeatTable, fc.HeartbeatTable)
			assert.Equal(t, hb.EvictAfter, fc.MaxAge, "a claim holds as long as peers would not evict")
			assert.Equal(t, hb.Interval, env.Heartbeat.Interval)
			assert.Equal(t, hb.Lease, env.Heartbeat.Lease)
			assert.Equal(t, hb.EvictAfter, env.Heartbeat.EvictAfter)
			assert.Equal(t, hb.OpTimeout, env.Heartbeat.OpTimeout)
			assert.NotNil(t, env.Logger)
			require.NotNil(t, env.Store)
		}
		assert.NotSame(t, e.get(0).DB, e.get(1).DB, "each node has its own pools")

		victim := e.get(1)
		records, err := victim.Store.List(t.Context())
		require.NoError(t, err)
		assert.Len(t, records, 2)
		c.StopHeartbeat(victim.Node)
		_, err = victim.Store.List(t.Context())
		require.ErrorIs(t, err, servicetest.ErrUnreachable, "the node's view is cut off")
		assert.ErrorContains(t, err, "list from node "+victim.Node)
		_, err = e.get(0).Store.List(t.Context())
		require.NoError(t, err, "the other node's view is not")
		c.ResumeHeartbeat(victim.Node)
		_, err = victim.Store.List(t.Context())
		require.NoError(t, err)
	})
}

// TestMemoryEnv: in memory, the services get no database, and the
// node's view of the in-memory store.
func TestMemoryEnv(t *testing.T) {
	var e envs
	c := servicetest.Start(t, servicetest.Options{Nodes: 1, Services: e.services})
	env := e.get(0)
	assert.Equal(t, c.Node(0).UUID(), env.Node)
	assert.Nil(t, env.DB)
	assert.Nil(t, env.Fence)
	assert.Empty(t, env.Tables)
	assert.IsType(t, &memstore.View{}, env.Store)
	assert.Equal(t, heartbeat.TestConfig().EvictAfter, env.Heartbeat.EvictAfter)
	assert.Equal(t, servicetest.Database{}, c.Database())
	assert.Nil(t, c.DB())
	require.NotNil(t, c.Store())
	c.StopHeartbeat(env.Node)
	_, err := env.Store.List(t.Context())
	assert.ErrorIs(t, err, memstore.ErrUnreachable)
	c.ResumeHeartbeat(env.Node)
}

// TestSQLFaults: the faults act on a cluster on SQL as in memory, in
// real time: a stopped node leaves every ring at once; a node cut off
// from the store is evicted and rejoins with a new epoch once it reaches
// the store again; a partitioned node is evicted as a zombie and rejoins
// once healed; a dropped node stays live and in every ring.
func TestSQLFaults(t *testing.T) {
	onEachDatabase(t, func(t *testing.T, db string) {
		c := startCounters(t, db, 4, nil)
		rejoined := func(n *service.Node, epoch int64) func() bool {
			return func() bool {
				return n.State() == service.StateServing && n.Epoch() != epoch && !n.LeaseExpired() && inEveryLiveRing(c, n.UUID())
			}
		}

		stopped := c.Node(3).UUID()
		require.NoError(t, c.Stop(stopped))
		assert.True(t, c.Gone(stopped), "every peer dropped it before Stop returned")
		assert.True(t, c.Converged())

		cut := c.Node(1)
		epoch := cut.Epoch()
		start := time.Now()
		c.StopHeartbeat(cut.UUID())
		assert.NotContains(t, c.LiveUUIDs(), cut.UUID())
		c.WaitGone(t, cut.UUID(), 3*sqlHB.EvictAfter)
		t.Logf("a node cut off from the store left every ring %v after the cut (evict after %v)", time.Since(start).Round(time.Millisecond), sqlHB.EvictAfter)
		c.ResumeHeartbeat(cut.UUID())
		c.WaitFor(t, 3*sqlHB.EvictAfter, "the evicted node rejoins with a new epoch", rejoined(cut, epoch))
		c.WaitConverged(t, 2*sqlHB.EvictAfter)

		parted := c.Node(2)
		epoch = parted.Epoch()
		start = time.Now()
		c.Partition(parted.UUID(), true)
		c.WaitGone(t, parted.UUID(), 3*sqlHB.EvictAfter)
		t.Logf("a node cut off from the bus left every ring %v after the cut (lease %v)", time.Since(start).Round(time.Millisecond), sqlHB.Lease)
		c.Partition(parted.UUID(), false)
		c.WaitFor(t, 3*sqlHB.EvictAfter, "the healed node rejoins with a new epoch", rejoined(parted, epoch))
		c.WaitConverged(t, 2*sqlHB.EvictAfter)

		dropped := c.Node(0)
		epoch = dropped.Epoch()
		c.Drop(dropped.UUID(), true)
		ctx, cancel := context.WithTimeout(t.Context(), 2*sqlHB.EvictAfter)
		defer cancel()
		assert.Error(t, c.AwaitGone(ctx, dropped.UUID()), "it goes on beating: nobody evicts it")
		assert.Len(t, c.Live(), 3)
		assert.Equal(t, epoch, dropped.Epoch())
		c.Drop(dropped.UUID(), false)
	})
}

// TestSQLOptionsInvalid: New refuses options that make no sense on SQL,
// or without it, and names a database it cannot reach with its password
// masked.
func TestSQLOptionsInvalid(t *testing.T) {
	schema := &nodekit.Schema{Migrations: func(sqlstore.Dialect, string) [][]string { return nil }}
	for _, tc := range []struct {
		name string
		opts servicetest.Options
		want []string
	}{
		{"a Schema needs a database", servicetest.Options{Schema: schema}, []string{"Options.Schema needs tables: set Options.Database"}},
		{"no store clock on SQL", servicetest.Options{Database: "sqlite", StoreClock: time.Now}, []string{"Options.StoreClock is for the in-memory store"}},
		{"the SQL timing is the base", servicetest.Options{Database: "sqlite", Heartbeat: heartbeat.Config{Interval: 600 * time.Millisecond}},
			[]string{"merged with servicetest.SQLHeartbeat()", "EvictAfter 1s must be at least twice Interval 600ms"}},
		{"a SQLite file of one's own", servicetest.Options{Database: "sqlite:/tmp/x.db"}, []string{`use "sqlite"`}},
		{"not a database", servicetest.Options{Database: "nonsense"}, []string{"Options.Database", "cannot tell the database"}},
		{"unreachable", servicetest.Options{Database: "postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=2"},
			[]string{"postgres://u:xxxxx@127.0.0.1:1/db", "check Options.Database"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := servicetest.New(t.Context(), tc.opts)
			require.Error(t, err)
			assert.Nil(t, c)
			for _, w := range tc.want {
				assert.ErrorContains(t, err, w)
			}
			assert.NotContains(t, err.Error(), "hunter2")
		})
	}
}

package main

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestCountsSurviveNodeDeath drives the counter service on a 3-node
// cluster of the test kit, in virtual time: each key is counted by its
// ring owner, concurrent increments of one key are all counted, and after
// a node dies without a goodbye the counts are intact and the dead node's
// keys are counted by survivors; a message delivered again (same ID) is
// counted once.
func TestCountsSurviveNodeDeath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := message.NewRegistry()
		message.MustRegister[Increment](reg, "counter.v1.Increment")
		message.MustRegister[Count](reg, "counter.v1.Count")
		counts := &Counts{m: map[string]int64{}}
		c := servicetest.Start(t, servicetest.Options{
			Nodes:    3,
			Registry: reg,
			Services: func(int, nodekit.Env) []service.Service { return []service.Service{counts.Service()} },
		})
		cl := c.Client(t)
		incr := func(key string) Count {
			t.Helper()
			got, err := service.Call[Count](t.Context(), cl, Increment{Key: key})
			require.NoError(t, err)
			assert.Equal(t, c.Owner(key), got.Node, "key %s is counted by its ring owner", key)
			return got
		}
		keys := make([]string, 30)
		for i := range keys {
			keys[i] = message.NewUUID()
			incr(keys[i])
		}

		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() { incr(keys[0]) })
		}
		wg.Wait()

		dead := c.Owner(keys[0])
		c.Kill(dead)
		c.WaitGone(t, dead, 2*time.Second)
		c.WaitConverged(t, time.Second)
		for i, k := range keys {
			got := incr(k)
			assert.NotEqual(t, dead, got.Node)
			want := int64(2)
			if i == 0 {
				want = 52
			}
			assert.Equal(t, want, got.Value, "key %d's count is intact", i)
		}
		_, err := service.Call[Count](t.Context(), cl, Increment{})
		assert.ErrorIs(t, err, message.ErrBadRequest, "an Increment without a key is refused")

		id := message.NewUUID() // the same message delivered twice
		first, err := service.Call[Count](t.Context(), cl, Increment{Key: keys[1]}, bus.WithID(id))
		require.NoError(t, err)
		again, err := service.Call[Count](t.Context(), cl, Increment{Key: keys[1]}, bus.WithID(id))
		require.NoError(t, err)
		assert.Equal(t, int64(3), first.Value)
		assert.Equal(t, first, again, "a message delivered again is counted once, and answered as before")
	})
}

// The program's output; node UUIDs differ per run, so it prints none.
func Example() {
	main()
	// Output:
	// round 1, 3 live nodes
	// key 1 = 1, counted by its owner: true
	// key 2 = 1, counted by its owner: true
	// key 3 = 1, counted by its owner: true
	// round 2, 3 live nodes
	// key 1 = 2, counted by its owner: true
	// key 2 = 2, counted by its owner: true
	// key 3 = 2, counted by its owner: true
	// round 3, 2 live nodes
	// key 1 = 3, counted by its owner: true
	// key 2 = 3, counted by its owner: true
	// key 3 = 3, counted by its owner: true
}

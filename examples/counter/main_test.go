package main

import (
	"bytes"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const wantOutput = `key 1 = 1, counted by its owner: true
key 2 = 1, counted by its owner: true
key 3 = 1, counted by its owner: true
key 1 = 2, counted by its owner: true
key 2 = 2, counted by its owner: true
key 3 = 2, counted by its owner: true
killed the node owning key 1; live nodes: 2
key 1 = 3, counted by its owner: true
key 2 = 3, counted by its owner: true
key 3 = 3, counted by its owner: true
`

// TestRun runs the program in virtual time.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		require.NoError(t, run(&out))
		assert.Equal(t, wantOutput, out.String())
	})
}

// TestCountsSurviveNodeDeath drives the counter service with the user
// test kit: each key is counted by its ring owner, concurrent increments
// of one key are all counted, and after a node dies without a goodbye the
// counts are intact and the dead node's keys are counted by survivors.
func TestCountsSurviveNodeDeath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := message.NewRegistry()
		message.MustRegister[Increment](reg, "counter.v1.Increment")
		message.MustRegister[Count](reg, "counter.v1.Count")
		counts := &memCounts{}
		c := servicetest.Start(t, servicetest.Options{
			Nodes:    3,
			Registry: reg,
			Services: func(int) []service.Service { return []service.Service{counter{counts}} },
		})
		cl := c.Client(t)
		ctx := t.Context()
		incr := func(key string) Count {
			t.Helper()
			got, err := service.CallAPI[Count](ctx, cl, Increment{Key: key}, bus.WithResource(key))
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
	})
}

// The program's output; node UUIDs differ per run, so it prints none.
func Example() {
	if err := run(os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// key 1 = 1, counted by its owner: true
	// key 2 = 1, counted by its owner: true
	// key 3 = 1, counted by its owner: true
	// key 1 = 2, counted by its owner: true
	// key 2 = 2, counted by its owner: true
	// key 3 = 2, counted by its owner: true
	// killed the node owning key 1; live nodes: 2
	// key 1 = 3, counted by its owner: true
	// key 2 = 3, counted by its owner: true
	// key 3 = 3, counted by its owner: true
}

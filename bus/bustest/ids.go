package bustest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testSharedID: the id given with WithID is the one the handler reads,
// and two calls in flight at once with that one id each get their own
// reply (a transport must not deduplicate or route by message id).
func testSharedID(t *testing.T, c *cluster) {
	a, b := c.open("", bus.Config{}), c.open("", bus.Config{})
	var arrived sync.WaitGroup
	arrived.Add(2)
	both := make(chan struct{})
	go func() { arrived.Wait(); close(both) }()
	ids := make(chan string, 2)
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		ids <- r.ID()
		arrived.Done()
		select {
		case <-both: // reply once both calls are in flight
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		e := r.Payload.(*Echo)
		return Echoed{Text: e.Text, Seq: e.Seq, Node: b.id}, nil
	})))
	id := message.NewUUID()
	var wg sync.WaitGroup
	for seq := range 2 {
		wg.Go(func() {
			got, err := bus.Call[Echoed](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Echo{Seq: seq},
				bus.WithID(id), bus.WithTimeout(10*time.Second))
			assert.NoError(t, err, "call %d of two sharing one message id", seq)
			assert.Equal(t, seq, got.Seq, "call %d must get its own reply, not the other's", seq)
		})
	}
	wg.Wait()
	for range 2 {
		assert.Equal(t, id, recv(t, ids, time.Second, "message id seen by the handler"), "the handler reads the id given with WithID")
	}
	assert.Zero(t, a.Stats().Pending)
}

package bus_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowBody is a payload whose decoding takes decodeTime: the time
// between the receiver's deadline checks and its handler's start, as a
// huge body or a process paused there would make it.
type slowBody struct {
	N int `json:"n"`
}

const decodeTime = 300 * time.Millisecond

func (b *slowBody) UnmarshalJSON(data []byte) error {
	time.Sleep(decodeTime)
	var v struct {
		N int `json:"n"`
	}
	err := json.Unmarshal(data, &v)
	b.N = v.N
	return err
}

// observed collects the ops of one message type.
type observed struct {
	ops chan bus.Observation
}

func (o *observed) Observe(ob bus.Observation) {
	if ob.Type == "test.v1.SlowBody" && (ob.Op == bus.OpHandle || ob.Op == bus.OpReject) {
		o.ops <- ob
	}
}

// TestHandlerNeverStartsPastItsDeadline: the receiver checks the deadline
// with the very instant its handler would start, after everything it
// does before (here a decode that outlasts the deadline). A message whose
// deadline passed meanwhile is refused as late (Stats.Late, OpReject with
// a timeout); it is never handed to the handler, and every handler start
// the observer sees is before its deadline.
func TestHandlerNeverStartsPastItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := registry()
		message.MustRegister[slowBody](reg, "test.v1.SlowBody")
		obs := &observed{ops: make(chan bus.Observation, 4)}
		a, b, _ := pair(t, bus.Config{Registry: reg, Observer: obs})
		var ran atomic.Int32
		mux := bus.NewMux()
		bus.Handle(mux, func(ctx context.Context, _ *bus.Request, m slowBody) (Greeting, error) {
			ran.Add(1)
			return Greeting{Text: "ran"}, nil
		})
		require.NoError(t, b.Register(t.Context(), "svc", mux))

		_, err := bus.Call[any](t.Context(), a, b.LocalID("svc"), slowBody{N: 1}, bus.WithTimeout(decodeTime/2))
		require.ErrorIs(t, err, message.ErrTimeout, "the caller learns the truth by its deadline")
		synctest.Wait()
		ob := <-obs.ops
		assert.Equal(t, bus.OpReject, ob.Op, "refused, not handled: %+v", ob)
		assert.ErrorIs(t, ob.Err, message.ErrTimeout)
		assert.Zero(t, ran.Load(), "the handler never started past the deadline")
		assert.EqualValues(t, 1, b.Stats().Late)

		reply, err := bus.Call[Greeting](t.Context(), a, b.LocalID("svc"), slowBody{N: 2}, bus.WithTimeout(10*decodeTime))
		require.NoError(t, err, "a message whose decode ends in time runs")
		assert.Equal(t, "ran", reply.Text)
		ob = <-obs.ops
		assert.Equal(t, bus.OpHandle, ob.Op)
		assert.False(t, ob.Start.After(ob.Deadline), "started at %s, deadline %s", ob.Start, ob.Deadline)
	})
}

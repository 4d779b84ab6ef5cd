package bustest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Cutter is implemented by an [Env] that can cut a node off from the
// broker and heal it (a network cut, not a crash): the node's
// transports fail their operations meanwhile and report it through
// driver.Transport.WatchState. Scenarios that need it run when Features.CanCut is
// set.
type Cutter interface {
	// Cut cuts every transport of node off from the broker.
	Cut(t *testing.T, node string)
	// Heal undoes Cut.
	Heal(t *testing.T, node string)
}

// testRerouteKilledQueue: the one-way messages queued for a killed node
// are each moved to the new owner by a survivor, none lost, and the dead
// node's queue is deleted once empty.
func testRerouteKilledQueue(t *testing.T, c *cluster) {
	if !c.h.Features.KilledQueuesPersist {
		t.Skip("bustest: the transport declares KilledQueuesPersist false")
	}
	a := c.open("", bus.Config{})
	deadID := message.NewUUID()
	dead := c.open(deadID, bus.Config{})
	require.NoError(t, dead.Register(t.Context(), "svc", echoHandler(dead)))
	c.env.Kill(t, deadID)
	const n = 50
	for i := range n {
		require.NoError(t, a.Send(t.Context(), bus.ServiceID("svc", deadID), Echo{Seq: i}))
	}

	heir := c.open("", bus.Config{})
	var mu sync.Mutex
	got := map[int]int{}
	require.NoError(t, heir.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		mu.Lock()
		got[r.Payload.(*Echo).Seq]++
		mu.Unlock()
		return nil, nil
	})))
	stats, err := busx.Of(heir).Reroute(t.Context(), busx.Of(dead).QueueName(bus.ServiceID("svc", deadID)), func(env *wire.Envelope) error {
		env.ServiceID = heir.LocalID("svc")
		return nil
	}, false)
	require.NoError(t, err)
	assert.Equal(t, n, stats.Moved)
	eventually(t, 10*time.Second, "every rerouted message is handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == n
	})
	mu.Lock()
	for seq, k := range got {
		assert.Equal(t, 1, k, "message %d handled once", seq)
	}
	mu.Unlock()
	err = a.Send(t.Context(), bus.ServiceID("svc", deadID), Echo{}, bus.WithDelivery(bus.Confirmed))
	assert.ErrorIs(t, err, message.ErrNoRoute, "the dead node's queue is deleted once empty")
}

// testIdleDelete: DeleteQueueIfIdle keeps a queue that holds a message
// or has a consumer.
func testIdleDelete(t *testing.T, c *cluster) {
	tr := c.env.Transport(t, message.NewUUID())
	ctx := t.Context()
	q := c.prefix + ".message.idle.q"
	require.NoError(t, tr.DeclareQueue(ctx, q, driver.QueueOptions{Kind: driver.QueueDurable}))
	t.Cleanup(func() { _ = tr.DeleteQueue(context.Background(), q) })
	require.NoError(t, tr.Publish(ctx, q, []byte("x")))
	require.ErrorIs(t, tr.DeleteQueueIfIdle(ctx, q), message.ErrBusy, "a queue with a message stays")
	got := make(chan driver.Delivery, 1)
	cons, err := tr.Consume(ctx, q, driver.ConsumeOptions{Prefetch: 1}, func(dl driver.Delivery) { got <- dl })
	require.NoError(t, err)
	dl := recv(t, got, 10*time.Second, "the message")
	require.NoError(t, dl.Ack())
	require.ErrorIs(t, tr.DeleteQueueIfIdle(ctx, q), message.ErrBusy, "a queue with a consumer stays")
	require.NoError(t, cons.Cancel())
	require.NoError(t, tr.DeleteQueueIfIdle(ctx, q), "an idle queue is deleted")
	require.ErrorIs(t, tr.Publish(ctx, q, []byte("y")), message.ErrNoRoute)
	require.NoError(t, tr.DeleteQueueIfIdle(ctx, q), "a missing queue is not an error")
}

// testCutReported: a transport cut off from the broker reports it as
// reconnecting (so a node can step aside), fails its operations
// meanwhile, and reports connected once the cut heals, its queues and
// consumers working again.
func testCutReported(t *testing.T, c *cluster) {
	cutter, ok := c.env.(Cutter)
	if !ok {
		t.Fatal("bustest: Features.CanCut is set but the Env does not implement bustest.Cutter")
	}
	a := c.open("", bus.Config{})
	id := message.NewUUID()
	b := c.open(id, bus.Config{})
	require.NoError(t, b.Register(t.Context(), "svc", echoHandler(b)))
	states := watchStates(t, b.tr)
	cutter.Cut(t, id)
	awaitState(t, states, driver.TransportReconnecting)
	cutter.Heal(t, id)
	awaitState(t, states, driver.TransportConnected)
	eventually(t, 20*time.Second, "calls reach the healed node again", func() bool {
		_, err := bus.Call[Echoed](t.Context(), a.CloudBus, b.LocalID("svc"), Echo{Seq: 1}, bus.WithTimeout(time.Second))
		return err == nil
	})
}

// watchStates reports tr's state changes on the returned channel (the
// latest 16; more are dropped) until the test ends.
func watchStates(t *testing.T, tr driver.Transport) <-chan driver.TransportState {
	t.Helper()
	states := make(chan driver.TransportState, 16)
	stop := tr.WatchState(func(s driver.TransportState) {
		select {
		case states <- s:
		default:
		}
	})
	t.Cleanup(stop)
	return states
}

func awaitState(t *testing.T, ch <-chan driver.TransportState, want driver.TransportState) {
	t.Helper()
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	for {
		select {
		case s := <-ch:
			if s == want {
				return
			}
		case <-timer.C:
			t.Fatalf("bustest: the transport did not report %s within 20 s", want)
		}
	}
}

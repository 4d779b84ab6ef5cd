package bustest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testLateInQueue: a request whose caller gave up while it waited in the
// queue (no consumer: a paused node, a backlog) is never run when a
// consumer finally takes it: the absolute deadline in cluster time says
// it is late, however long the relative timeout still looks.
func testLateInQueue(t *testing.T, c *cluster) {
	clock := bus.LocalClock()
	a, b := c.open("", bus.Config{Clock: clock}), c.open("", bus.Config{Clock: clock})
	var ran atomic.Int32
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, e Echo) (Echoed, error) {
		ran.Add(1)
		return Echoed{Seq: e.Seq}, nil
	})
	ctx := t.Context()
	require.NoError(t, b.Register(ctx, "svc", mux))
	id := b.LocalID("svc")
	require.NoError(t, busx.Of(b).Unregister(ctx, id, false), "the queue stays, with no consumer")

	const timeout = 300 * time.Millisecond
	start := time.Now()
	_, err := bus.Call[any](ctx, a.CloudBus, id, Echo{Seq: 1}, bus.WithTimeout(timeout))
	require.ErrorIs(t, err, message.ErrTimeout, "the caller learns the truth by its deadline")
	assert.Less(t, time.Since(start), timeout+2*time.Second)
	require.NoError(t, a.Send(ctx, id, Echo{Seq: 2}, bus.WithTimeout(timeout)), "a one-way message with a deadline")
	time.Sleep(timeout) // the send's deadline passes while it waits in the queue

	require.NoError(t, b.Register(ctx, "svc", mux), "a consumer comes back")
	eventually(t, 10*time.Second, "both late messages are refused as late", func() bool { return b.Stats().Late == 2 })
	assert.Zero(t, ran.Load(), "no handler ran after its caller's deadline")

	reply, err := bus.Call[Echoed](ctx, a.CloudBus, id, Echo{Seq: 3}, bus.WithTimeout(10*time.Second))
	require.NoError(t, err, "a message in time still runs")
	assert.Equal(t, 3, reply.Seq)
	assert.EqualValues(t, 1, ran.Load())
}

// testLateBehindOthers: a request delivered in time but kept waiting on
// the receiver (behind a busy handler slot) does not start once its
// deadline has passed.
func testLateBehindOthers(t *testing.T, c *cluster) {
	clock := bus.LocalClock()
	a := c.open("", bus.Config{Clock: clock})
	b := c.open("", bus.Config{Clock: clock, Limits: bus.Limits{MaxConcurrency: 1}})
	bl := newBlocker()
	require.NoError(t, b.Register(t.Context(), "svc", bl))
	id := b.LocalID("svc")
	first := make(chan error, 1)
	go func() {
		_, err := bus.Call[any](t.Context(), a.CloudBus, id, Echo{Seq: 1}, bus.WithTimeout(20*time.Second))
		first <- err
	}()
	recv(t, bl.started, 10*time.Second, "the first handler to start")
	_, err := bus.Call[any](t.Context(), a.CloudBus, id, Echo{Seq: 2}, bus.WithTimeout(300*time.Millisecond))
	require.ErrorIs(t, err, message.ErrTimeout)
	eventually(t, 10*time.Second, "the second message to reach the receiver", func() bool {
		st := b.Stats()
		return st.Queued == 1 || st.Late == 1
	})
	time.Sleep(100 * time.Millisecond)
	close(bl.release)
	require.NoError(t, recv(t, first, 20*time.Second, "the first call's outcome"))
	eventually(t, 10*time.Second, "the waiting message is refused as late", func() bool { return b.Stats().Late == 1 })
	select {
	case <-bl.started:
		t.Fatal("bustest: a handler started after its caller's deadline")
	default:
	}
}

// failReplies is a transport whose first n publishes to reply queues
// fail as if the broker were unreachable; everything else is the wrapped
// transport's.
type failReplies struct {
	driver.Transport
	n atomic.Int32
}

func (f *failReplies) Publish(ctx context.Context, queue string, data []byte) error {
	if strings.Contains(queue, ".reply.") && f.n.Add(-1) >= 0 {
		return fmt.Errorf("bustest: injected reply failure: %w", message.ErrUnavailable)
	}
	return f.Transport.Publish(ctx, queue, data)
}

// testUnrepliedRedelivered: a handler ran but its reply could not be
// published; the message is not acknowledged as done but given back, so
// it runs again and the caller gets a reply within its deadline, and
// these givebacks do not count towards MaxDeliveries (here 1: a single
// counted redelivery would dead-letter it).
func testUnrepliedRedelivered(t *testing.T, c *cluster) {
	id := message.NewUUID()
	tr := &failReplies{Transport: c.env.Transport(t, id)}
	tr.n.Store(2)
	a := c.open("", bus.Config{})
	b := c.open(id, bus.Config{Transport: tr, Limits: bus.Limits{MaxDeliveries: 1}})
	var ran atomic.Int32
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, e Echo) (Echoed, error) {
		ran.Add(1)
		return Echoed{Seq: e.Seq, Node: b.id}, nil
	})
	require.NoError(t, b.Register(t.Context(), "svc", mux))

	reply, err := bus.Call[Echoed](t.Context(), a.CloudBus, b.LocalID("svc"), Echo{Seq: 7}, bus.WithTimeout(20*time.Second))
	require.NoError(t, err, "the caller gets its reply once one can be published")
	assert.Equal(t, 7, reply.Seq)
	assert.EqualValues(t, 3, ran.Load(), "run, reply lost, given back; twice; then replied")
	assert.EqualValues(t, 2, b.Stats().Released)

	dead := make(chan driver.Delivery, 1)
	probe := c.env.Transport(t, message.NewUUID())
	cons, err := probe.Consume(t.Context(), b.DeadLetterQueue(), driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) {
		dead <- d
		_ = d.Reject(true)
	})
	require.NoError(t, err)
	defer cons.Cancel()
	select {
	case d := <-dead:
		t.Fatalf("bustest: the message was dead-lettered (%s): a giveback counted as a failed delivery", d.Header(driver.HeaderDeadReason))
	case <-time.After(300 * time.Millisecond):
	}
}

package bustest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// blocker is a handler that blocks until released or its ctx ends.
type blocker struct {
	started chan struct{}
	release chan struct{}
	ctxDone atomic.Int32
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (bl *blocker) Handle(ctx context.Context, r *bus.Request) (any, error) {
	bl.started <- struct{}{}
	select {
	case <-bl.release:
		e := r.Payload.(*Echo)
		return Echoed{Seq: e.Seq}, nil
	case <-ctx.Done():
		bl.ctxDone.Add(1)
		return nil, ctx.Err()
	}
}

func testDeadline(t *testing.T, c *cluster) {
	a, b := c.open("", bus.Config{}), c.open("", bus.Config{})
	bl := newBlocker()
	defer close(bl.release)
	require.NoError(t, b.Register(t.Context(), "svc", bl))
	const timeout = 300 * time.Millisecond
	start := time.Now()
	_, err := bus.Call[any](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Echo{}, bus.WithTimeout(timeout))
	took := time.Since(start)
	assert.ErrorIs(t, err, message.ErrTimeout)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "a timeout also matches context.DeadlineExceeded")
	assert.GreaterOrEqual(t, took, timeout)
	assert.Less(t, took, timeout+2*time.Second, "the call must end at its deadline")
	assert.Zero(t, a.Stats().Pending)
	eventually(t, 5*time.Second, "the handler's ctx must expire with the sender's deadline", func() bool { return bl.ctxDone.Load() == 1 })

	// Without any deadline the configured default applies: never hang.
	d := c.open("", bus.Config{Limits: bus.Limits{DefaultTimeout: 200 * time.Millisecond}})
	start = time.Now()
	_, err = bus.Call[any](context.Background(), d.CloudBus, bus.ServiceID("svc", b.id), Echo{})
	assert.ErrorIs(t, err, message.ErrTimeout)
	assert.Less(t, time.Since(start), 3*time.Second)
}

func testCancel(t *testing.T, c *cluster) {
	a, b := c.open("", bus.Config{}), c.open("", bus.Config{})
	bl := newBlocker()
	defer close(bl.release)
	require.NoError(t, b.Register(t.Context(), "svc", bl))
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := bus.Call[any](ctx, a.CloudBus, bus.ServiceID("svc", b.id), Echo{}, bus.WithTimeout(30*time.Second))
		errc <- err
	}()
	recv(t, bl.started, 5*time.Second, "handler start")
	assert.Equal(t, 1, a.Stats().Pending)
	cancel()
	err := recv(t, errc, 2*time.Second, "the cancelled call's return")
	assert.ErrorIs(t, err, message.ErrCanceled)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, a.Stats().Pending, "a cancelled call must remove its pending entry at once")
}

func testLateReply(t *testing.T, c *cluster) {
	a, b := c.open("", bus.Config{}), c.open("", bus.Config{})
	release := make(chan struct{})
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, e Echo) (Echoed, error) {
		<-release // reply only after the caller gave up
		return Echoed{Seq: e.Seq}, nil
	})
	require.NoError(t, b.Register(t.Context(), "svc", mux))
	_, err := bus.Call[any](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Echo{Seq: 1}, bus.WithTimeout(200*time.Millisecond))
	require.ErrorIs(t, err, message.ErrTimeout)
	close(release)
	eventually(t, 5*time.Second, "the late reply must be counted", func() bool { return a.Stats().LateReplies == 1 })
	assert.Zero(t, a.Stats().Pending)
	r, err := bus.Call[Echoed](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Echo{Seq: 2}, bus.WithTimeout(10*time.Second))
	require.NoError(t, err)
	assert.Equal(t, 2, r.Seq, "a late reply must never be taken for another call's reply")
}

func testCloseInFlight(t *testing.T, c *cluster) {
	const n = 10
	a, b := c.open("", bus.Config{}), c.open("", bus.Config{})
	bl := newBlocker()
	defer close(bl.release)
	require.NoError(t, b.Register(t.Context(), "svc", bl))
	errc := make(chan error, n)
	for i := range n {
		go func() {
			_, err := bus.Call[any](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Echo{Seq: i}, bus.WithTimeout(30*time.Second))
			errc <- err
		}()
	}
	for range n {
		recv(t, bl.started, 5*time.Second, "handler start")
	}
	start := time.Now()
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "Close is idempotent")
	for range n {
		err := recv(t, errc, 2*time.Second, "a call ended by Close")
		assert.ErrorIs(t, err, message.ErrClosed)
	}
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Zero(t, a.Stats().Pending)
	_, err := bus.Call[any](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Echo{})
	assert.ErrorIs(t, err, message.ErrClosed, "a closed bus refuses new calls")
	assert.ErrorIs(t, a.Register(t.Context(), "other", bl), message.ErrClosed)
}

func testKilledQueueKeeps(t *testing.T, c *cluster) {
	if !c.h.Features.KilledQueuesPersist {
		t.Skip("bustest: the transport declares KilledQueuesPersist false")
	}
	a := c.open("", bus.Config{})
	bID := message.NewUUID()
	b := c.open(bID, bus.Config{})
	require.NoError(t, b.Register(t.Context(), "svc", echoHandler(b)))
	c.env.Kill(t, bID)

	target := bus.ServiceID("svc", bID)
	for i := range 5 {
		require.NoError(t, a.Send(t.Context(), target, Echo{Seq: i}),
			"sending to a killed node's queue must succeed: the queue stays, it is not no-route")
	}
	got := make(chan int, 10)
	b2 := c.open(bID, bus.Config{})
	require.NoError(t, b2.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		got <- r.Payload.(*Echo).Seq
		return nil, nil
	})))
	seen := map[int]bool{}
	for range 5 {
		seen[recv(t, got, 10*time.Second, "a message kept for the next consumer")] = true
	}
	assert.Len(t, seen, 5)
}

func testRedelivery(t *testing.T, c *cluster) {
	pub := c.env.Transport(t, message.NewUUID())
	queue := c.prefix + ".message.redeliver.q"
	require.NoError(t, pub.DeclareQueue(t.Context(), queue, driver.QueueOptions{Kind: driver.QueueDurable}))
	t.Cleanup(func() { _ = pub.DeleteQueue(context.Background(), queue) })

	victim := message.NewUUID()
	tv := c.env.Transport(t, victim)
	first := make(chan driver.Delivery, 1)
	_, err := tv.Consume(t.Context(), queue, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) { first <- d })
	require.NoError(t, err)
	require.NoError(t, pub.Publish(t.Context(), queue, []byte("job-1")))
	d := recv(t, first, 5*time.Second, "first delivery")
	assert.False(t, d.Redelivered())
	c.env.Kill(t, victim) // dies without acknowledging

	again := make(chan driver.Delivery, 1)
	tn := c.env.Transport(t, message.NewUUID())
	_, err = tn.Consume(t.Context(), queue, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) { again <- d })
	require.NoError(t, err)
	d2 := recv(t, again, 10*time.Second, "redelivery after the consumer died")
	assert.Equal(t, "job-1", string(d2.Body()))
	assert.True(t, d2.Redelivered(), "a redelivered message must say so")
	_ = d.Ack() // stale: its consumer died; this must not settle the redelivery
	require.NoError(t, d2.Ack())
}

func testPoison(t *testing.T, c *cluster) {
	const limit = 3
	tr := c.env.Transport(t, message.NewUUID())
	queue := c.prefix + ".message.poison.q"
	dead := c.prefix + ".poison.dead"
	ctx := t.Context()
	require.NoError(t, tr.DeclareQueue(ctx, dead, driver.QueueOptions{Kind: driver.QueueDurable}))
	require.NoError(t, tr.DeclareQueue(ctx, queue, driver.QueueOptions{Kind: driver.QueueDurable, MaxDeliveries: limit, DeadLetter: dead}))
	t.Cleanup(func() {
		_ = tr.DeleteQueue(context.Background(), queue)
		_ = tr.DeleteQueue(context.Background(), dead)
	})

	var handedPoison atomic.Int32
	good := make(chan string, 10)
	_, err := tr.Consume(ctx, queue, driver.ConsumeOptions{Prefetch: 4}, func(d driver.Delivery) {
		if string(d.Body()) == "poison" {
			handedPoison.Add(1)
			_ = d.Reject(true) // gives it back, as a crashing consumer would
			return
		}
		good <- string(d.Body())
		_ = d.Ack()
	})
	require.NoError(t, err)
	deadGot := make(chan driver.Delivery, 1)
	_, err = tr.Consume(ctx, dead, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) {
		deadGot <- d
		_ = d.Ack()
	})
	require.NoError(t, err)

	for _, body := range []string{"ok-1", "poison", "ok-2", "ok-3"} {
		require.NoError(t, tr.Publish(ctx, queue, []byte(body)))
	}
	got := map[string]bool{}
	for range 3 {
		got[recv(t, good, 10*time.Second, "the other messages of the queue")] = true
	}
	assert.Len(t, got, 3, "the other messages keep flowing")
	d := recv(t, deadGot, 10*time.Second, "the poison message in the dead-letter queue")
	assert.Equal(t, "poison", string(d.Body()))
	assert.Contains(t, d.Header(driver.HeaderDeadReason), "3 times", "the dead-letter reason says why")
	assert.Equal(t, queue, d.Header(driver.HeaderDeadQueue))
	assert.EqualValues(t, limit, handedPoison.Load(), "a poison message is handed over exactly MaxDeliveries times")
}

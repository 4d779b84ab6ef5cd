package bustest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testSend(t *testing.T, c *cluster) {
	a, b := c.open("", bus.Config{}), c.open("", bus.Config{})
	got := make(chan *bus.Request, 1)
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		got <- r
		return nil, nil
	})))
	require.NoError(t, a.Send(t.Context(), bus.ServiceID("svc", b.id), Echo{Text: "hi"}, bus.WithHeader("traceparent", "00-abc-def-01")))
	r := recv(t, got, 5*time.Second, "delivery of a one-way message")
	assert.Equal(t, &Echo{Text: "hi"}, r.Payload)
	assert.Equal(t, wire.KindSend, busx.EnvelopeOf(r).Kind)
	assert.Equal(t, a.id, busx.EnvelopeOf(r).Source)
	assert.Equal(t, "00-abc-def-01", busx.EnvelopeOf(r).Headers["traceparent"], "headers must pass through untouched")
}

func testCall(t *testing.T, c *cluster) {
	a, b := c.open("", bus.Config{}), c.open("", bus.Config{})
	var seen atomic.Pointer[bus.Request]
	var deadlineLeft atomic.Int64
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, r *bus.Request, e Echo) (Echoed, error) {
		seen.Store(r)
		if dl, ok := ctx.Deadline(); ok {
			deadlineLeft.Store(int64(time.Until(dl)))
		}
		return Echoed{Text: e.Text, Seq: e.Seq, Node: b.id}, nil
	})
	require.NoError(t, b.Register(t.Context(), "svc", mux))
	got, err := bus.Call[Echoed](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Echo{Text: "x", Seq: 7},
		bus.WithTimeout(10*time.Second), bus.WithHeader("traceparent", "00-1-2-01"))
	require.NoError(t, err)
	assert.Equal(t, Echoed{Text: "x", Seq: 7, Node: b.id}, got)
	r := seen.Load()
	require.NotNil(t, r)
	assert.Equal(t, "00-1-2-01", busx.EnvelopeOf(r).Headers["traceparent"])
	left := time.Duration(deadlineLeft.Load())
	assert.True(t, left > 5*time.Second && left <= 10*time.Second, "the handler's ctx must carry the sender's deadline, got %s left", left)

	p, err := bus.Call[*Echoed](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Echo{Seq: 8})
	require.NoError(t, err, "Call[*T] works too")
	assert.Equal(t, 8, p.Seq)
	assert.Zero(t, a.Stats().Pending, "no pending entry after a completed call")
}

func testBroadcastOnce(t *testing.T, c *cluster) {
	const nodes, events = 4, 50
	var buses []*node
	counts := make([]map[int]int, nodes)
	var mu sync.Mutex
	done := make(chan int, nodes)
	for i := range nodes {
		n := c.open("", bus.Config{})
		buses = append(buses, n)
		counts[i] = map[int]int{}
		_, err := bus.Subscribe(n.CloudBus, func(ctx context.Context, p Ping) {
			mu.Lock()
			defer mu.Unlock()
			counts[i][p.Seq]++
			if p.Seq == -1 {
				done <- i
			}
		})
		require.NoError(t, err)
	}
	for s := range events {
		require.NoError(t, buses[0].Broadcast(t.Context(), Ping{Seq: s}))
	}
	require.NoError(t, buses[0].Broadcast(t.Context(), Ping{Seq: -1}), "end marker")
	for range nodes {
		recv(t, done, 10*time.Second, "end marker on every node")
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range nodes {
		for s := range events {
			assert.Equal(t, 1, counts[i][s], "node %d got event %d %d times, want exactly once", i, s, counts[i][s])
		}
		assert.Len(t, counts[i], events+1, "node %d got events that were not sent", i)
	}
}

func testSubscribeByType(t *testing.T, c *cluster) {
	a, b := c.open("", bus.Config{}), c.open("", bus.Config{})
	pings, pongs := make(chan Ping, 10), make(chan Pong, 10)
	_, err := bus.Subscribe(b.CloudBus, func(ctx context.Context, p Ping) { pings <- p })
	require.NoError(t, err)
	unsub, err := bus.Subscribe(b.CloudBus, func(ctx context.Context, p Pong) { pongs <- p })
	require.NoError(t, err)
	require.NoError(t, a.Broadcast(t.Context(), Pong{Seq: 1}))
	require.NoError(t, a.Broadcast(t.Context(), Ping{Seq: 2}))
	assert.Equal(t, Pong{Seq: 1}, recv(t, pongs, 5*time.Second, "pong"))
	assert.Equal(t, Ping{Seq: 2}, recv(t, pings, 5*time.Second, "ping"))
	assert.Empty(t, pings, "a Ping subscriber must not see Pong events")

	unsub()
	unsub() // idempotent
	require.NoError(t, a.Broadcast(t.Context(), Pong{Seq: 3}))
	require.NoError(t, a.Broadcast(t.Context(), Ping{Seq: 4}))
	assert.Equal(t, Ping{Seq: 4}, recv(t, pings, 5*time.Second, "ping after unsubscribe"))
	assert.Empty(t, pongs, "an unsubscribed handler must not run")

	type notRegistered struct{}
	_, err = bus.Subscribe(b.CloudBus, func(context.Context, notRegistered) {})
	assert.ErrorIs(t, err, message.ErrUnknownMessage, "subscribing to an unregistered type is refused")
}

func testCompeting(t *testing.T, c *cluster) {
	const nodes, calls = 3, 300
	client := c.open("", bus.Config{})
	for range nodes {
		n := c.open("", bus.Config{})
		require.NoError(t, busx.Of(n).RegisterShared(t.Context(), bus.APIPortal, echoHandler(n)))
	}
	var mu sync.Mutex
	handledBy := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for w := range 6 {
		wg.Go(func() {
			for i := w; i < calls; i += 6 {
				r, err := bus.Call[Echoed](t.Context(), client.CloudBus, bus.APIPortal, Echo{Seq: i}, bus.WithTimeout(10*time.Second))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				handledBy[r.Node]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Len(t, handledBy, nodes, "every consumer of the shared queue must get work: %v", handledBy)
	for n, k := range handledBy {
		assert.GreaterOrEqual(t, k, calls/nodes/3, "node %s handled only %d of %d: %v", n, k, calls, handledBy)
	}
	assert.Equal(t, "cloudbus.message.api.portal", "cloudbus.message."+bus.APIPortal)
	assert.Equal(t, c.prefix+".message.api.portal", busx.Of(client).QueueName(bus.APIPortal))
}

func testNoRoute(t *testing.T, c *cluster) {
	a := c.open("", bus.Config{})
	target := bus.ServiceID("svc", message.NewUUID())
	start := time.Now()
	err := a.Send(t.Context(), target, Echo{})
	assert.ErrorIs(t, err, message.ErrNoRoute)
	_, err = bus.Call[any](t.Context(), a.CloudBus, target, Echo{}, bus.WithTimeout(30*time.Second))
	assert.ErrorIs(t, err, message.ErrNoRoute)
	assert.Less(t, time.Since(start), c.h.Features.NoRouteWithin, "no-route must be reported promptly (a send and a call), not as a timeout")
	assert.Equal(t, message.RetrySafe, message.CodeOf(err).Retry())
	assert.Zero(t, a.Stats().Pending)
}

// testFastNoRoute: in the fast delivery mode nothing reports a missing
// queue: a Send returns nil and a Call ends at its deadline; a message
// sent with WithDelivery(bus.Confirmed) still fails at once, and the bus
// goes on working.
func testFastNoRoute(t *testing.T, c *cluster) {
	a, b := c.open("", bus.Config{Delivery: bus.Fast}), c.open("", bus.Config{})
	require.NoError(t, b.Register(t.Context(), "echo", echoHandler(b)))
	missing := bus.ServiceID("svc", message.NewUUID())
	assert.NoError(t, a.Send(t.Context(), missing, Echo{}), "a fast send to a missing queue is dropped, not refused")
	start := time.Now()
	_, err := bus.Call[any](t.Context(), a.CloudBus, missing, Echo{}, bus.WithTimeout(300*time.Millisecond))
	assert.ErrorIs(t, err, message.ErrTimeout, "a fast call to a missing queue ends at its deadline")
	assert.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond)
	assert.ErrorIs(t, a.Send(t.Context(), missing, Echo{}, bus.WithDelivery(bus.Confirmed)), message.ErrNoRoute,
		"WithDelivery(bus.Confirmed) overrides the bus's mode")
	for i := range 3 {
		got, err := bus.Call[Echoed](t.Context(), a.CloudBus, bus.ServiceID("echo", b.id), Echo{Seq: i}, bus.WithTimeout(10*time.Second))
		require.NoError(t, err, "the bus goes on working")
		assert.Equal(t, i, got.Seq)
	}
	assert.Zero(t, a.Stats().Pending)
}

func testOrdering(t *testing.T, c *cluster) {
	const n = 200
	a, b := c.open("", bus.Config{}), c.open("", bus.Config{Limits: bus.Limits{MaxQueuePerResource: n}})
	var mu sync.Mutex
	var order []int
	done := make(chan struct{})
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, r.Payload.(*Echo).Seq)
		if len(order) == n {
			close(done)
		}
		return nil, nil
	})))
	resource := message.NewUUID()
	for i := range n {
		require.NoError(t, a.Send(t.Context(), bus.ServiceID("svc", b.id), Echo{Seq: i}, bus.WithResource(resource)))
	}
	recv(t, done, 10*time.Second, fmt.Sprintf("all %d messages", n))
	mu.Lock()
	defer mu.Unlock()
	for i, s := range order {
		require.Equal(t, i, s, "messages from one sender about one resource must be handled in the order sent")
	}
}

func testUnknownType(t *testing.T, c *cluster) {
	a := c.open("", bus.Config{Registry: senderRegistry()})
	b := c.open("", bus.Config{})
	require.NoError(t, b.Register(t.Context(), "svc", echoHandler(b)))
	_, err := bus.Call[any](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Unlisted{X: 1}, bus.WithTimeout(10*time.Second))
	assert.ErrorIs(t, err, message.ErrUnknownMessage, "a type the receiver never registered")
	_, err = bus.Call[any](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Ping{Seq: 1}, bus.WithTimeout(10*time.Second))
	assert.ErrorIs(t, err, message.ErrUnknownMessage, "a registered type the service has no handler for")
	_, err = bus.Call[any](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), struct{ Y int }{}, bus.WithTimeout(10*time.Second))
	assert.ErrorIs(t, err, message.ErrUnknownMessage, "an unregistered type is refused before sending")
	_, err = bus.Call[Echoed](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Echo{}, bus.WithTimeout(10*time.Second))
	assert.NoError(t, err, "the service still works")
	_, err = bus.Call[Ping](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Echo{}, bus.WithTimeout(10*time.Second))
	assert.ErrorIs(t, err, message.ErrBadReply, "a reply of another type than requested: the handler ran")
}

func testErrorCodes(t *testing.T, c *cluster) {
	a, b := c.open("", bus.Config{}), c.open("", bus.Config{})
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, f Fail) (message.Empty, error) {
		return message.Empty{}, fmt.Errorf("handler: %w", message.NewError(f.Code, "failed on purpose").WithDetails("code "+string(f.Code)))
	})
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, e Echo) (message.Empty, error) {
		return message.Empty{}, errors.New("a plain Go error")
	})
	require.NoError(t, b.Register(t.Context(), "svc", mux))
	for _, code := range message.Codes() {
		_, err := bus.Call[any](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Fail{Code: code}, bus.WithTimeout(10*time.Second))
		require.Error(t, err)
		assert.ErrorIs(t, err, message.NewError(code, ""), "code %s must survive the wire", code)
		assert.Equal(t, code, message.CodeOf(err))
		assert.Contains(t, err.Error(), "code "+string(code), "details survive the wire")
	}
	_, err := bus.Call[any](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Echo{}, bus.WithTimeout(10*time.Second))
	assert.ErrorIs(t, err, message.ErrInternal, "a plain error becomes internal")
	assert.Contains(t, err.Error(), "a plain Go error")
}

func testPanic(t *testing.T, c *cluster) {
	a, b := c.open("", bus.Config{}), c.open("", bus.Config{})
	var calls atomic.Int32
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, e Echo) (Echoed, error) {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		return Echoed{Seq: e.Seq}, nil
	})
	require.NoError(t, b.Register(t.Context(), "svc", mux))
	_, err := bus.Call[any](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Echo{Seq: 1}, bus.WithTimeout(10*time.Second))
	assert.ErrorIs(t, err, message.ErrInternal)
	assert.Contains(t, err.Error(), "boom")
	r, err := bus.Call[Echoed](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Echo{Seq: 2}, bus.WithTimeout(10*time.Second))
	require.NoError(t, err, "the consumer must survive a panic")
	assert.Equal(t, 2, r.Seq)
}

func testOversize(t *testing.T, c *cluster) {
	a := c.open("", bus.Config{Limits: bus.Limits{MaxMessageSize: 4096}})
	b := c.open("", bus.Config{Limits: bus.Limits{MaxMessageSize: 4096}})
	var handled atomic.Int32
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		handled.Add(1)
		return nil, nil
	})))
	big := Blob{Data: string(make([]byte, 8192))}
	err := a.Send(t.Context(), bus.ServiceID("svc", b.id), big)
	assert.ErrorIs(t, err, message.ErrTooLarge)
	_, err = bus.Call[any](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), big, bus.WithTimeout(10*time.Second))
	assert.ErrorIs(t, err, message.ErrTooLarge)
	err = a.Broadcast(t.Context(), Blob{Data: string(make([]byte, 8192))})
	assert.ErrorIs(t, err, message.ErrTooLarge)
	// A small message after them arrives first: nothing oversize was sent.
	_, err = bus.Call[any](t.Context(), a.CloudBus, bus.ServiceID("svc", b.id), Blob{Data: "small"}, bus.WithTimeout(10*time.Second))
	require.NoError(t, err, "the small call after them failed; its handler ran %d times (0: the request was lost or late, 1: the reply was; a.Stats %+v, b.Stats %+v)",
		handled.Load(), a.Stats(), b.Stats())
	assert.Equal(t, int32(1), handled.Load(), "the oversize messages must never reach the handler")
}

func testConcurrentCalls(t *testing.T, c *cluster) {
	const callers, each = 64, 100
	a, b := c.open("", bus.Config{}), c.open("", bus.Config{})
	require.NoError(t, b.Register(t.Context(), "svc", echoHandler(b)))
	target := bus.ServiceID("svc", b.id)
	var wg sync.WaitGroup
	var failures atomic.Int32
	for w := range callers {
		wg.Go(func() {
			for i := range each {
				seq := w*each + i
				r, err := bus.Call[Echoed](t.Context(), a.CloudBus, target, Echo{Seq: seq}, bus.WithTimeout(30*time.Second))
				if err != nil || r.Seq != seq {
					if failures.Add(1) <= 5 {
						t.Errorf("call %d: got %+v, %v", seq, r, err)
					}
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, failures.Load(), "every one of %d calls must get its own reply", callers*each)
	assert.Zero(t, a.Stats().Pending)
}

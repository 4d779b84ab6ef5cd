package bus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
)

const (
	parentA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	parentB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

// traceSeen is what the two hops of TestTraceContextTravels saw.
type traceSeen struct {
	mu                  sync.Mutex
	ctxParent, ctxState string // the first handler's ctx
	hopParent, hopState string // the second handler's headers
	hopCtxParent        string
}

// TestTraceContextTravels: a handler's ctx carries its message's trace
// context, and a message sent with that ctx carries it on; a sender's
// own header wins; a malformed traceparent is dropped, not refused.
func TestTraceContextTravels(t *testing.T) {
	a, b, _ := pair(t, bus.Config{})
	var seen traceSeen
	hopped := make(chan struct{}, 4)
	first := bus.NewMux()
	bus.Handle(first, func(ctx context.Context, r *bus.Request, m Greet) (Greeting, error) {
		tp, ts := bus.TraceContextFrom(ctx)
		seen.mu.Lock()
		seen.ctxParent, seen.ctxState = tp, ts
		seen.mu.Unlock()
		var opts []bus.Option
		if m.Name == "own" {
			opts = append(opts, bus.WithHeader(bus.HeaderTraceParent, parentB))
		}
		return bus.Call[Greeting](ctx, b, bus.ServiceID("hop", a.Node()), Greet{Name: m.Name}, opts...)
	})
	second := bus.NewMux()
	bus.Handle(second, func(ctx context.Context, r *bus.Request, m Greet) (Greeting, error) {
		tp, _ := bus.TraceContextFrom(ctx)
		seen.mu.Lock()
		seen.hopParent, seen.hopState, seen.hopCtxParent = r.Header(bus.HeaderTraceParent), r.Header(bus.HeaderTraceState), tp
		seen.mu.Unlock()
		hopped <- struct{}{}
		return Greeting{Text: "ok"}, nil
	})
	require.NoError(t, b.Register(t.Context(), "first", first))
	require.NoError(t, a.Register(t.Context(), "hop", second))

	get := func() traceSeen {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		return traceSeen{ctxParent: seen.ctxParent, ctxState: seen.ctxState, hopParent: seen.hopParent, hopState: seen.hopState, hopCtxParent: seen.hopCtxParent}
	}

	ctx := bus.WithTraceContext(t.Context(), parentA, "k=v")
	_, err := bus.Call[Greeting](ctx, a, bus.ServiceID("first", b.Node()), Greet{Name: "ctx"}, bus.WithTimeout(5*time.Second))
	require.NoError(t, err)
	s := get()
	assert.Equal(t, parentA, s.ctxParent, "the handler's ctx")
	assert.Equal(t, "k=v", s.ctxState)
	assert.Equal(t, parentA, s.hopParent, "the handler's own call")
	assert.Equal(t, "k=v", s.hopState)
	assert.Equal(t, parentA, s.hopCtxParent)

	_, err = bus.Call[Greeting](ctx, a, bus.ServiceID("first", b.Node()), Greet{Name: "own"}, bus.WithTimeout(5*time.Second))
	require.NoError(t, err)
	s = get()
	assert.Equal(t, parentB, s.hopParent, "the sender's own header wins")
	assert.Empty(t, s.hopState, "and the ctx's tracestate is not mixed with it")

	_, err = bus.Call[Greeting](t.Context(), a, bus.ServiceID("first", b.Node()), Greet{Name: "bad"}, bus.WithTimeout(5*time.Second),
		bus.WithHeader(bus.HeaderTraceParent, "00-not-a-trace"))
	require.NoError(t, err, "a malformed traceparent is no error")
	s = get()
	assert.Empty(t, s.ctxParent, "a malformed traceparent is dropped")
	assert.Empty(t, s.hopParent)
}

// recTracer records the spans the bus starts and ends.
type recTracer struct {
	mu    sync.Mutex
	spans []bus.SpanInfo
	ended int
}

func (r *recTracer) Start(ctx context.Context, s bus.SpanInfo) (context.Context, func(error)) {
	r.mu.Lock()
	r.spans = append(r.spans, s)
	r.mu.Unlock()
	return bus.WithTraceContext(ctx, parentB, ""), func(error) {
		r.mu.Lock()
		r.ended++
		r.mu.Unlock()
	}
}

// TestTracerHook: the bus starts a span per call and per handle, and the
// message carries the trace context of the ctx Start returned.
func TestTracerHook(t *testing.T) {
	var rec recTracer
	a, b, _ := pair(t, bus.Config{Tracer: &rec})
	mux := bus.NewMux()
	got := make(chan string, 1)
	bus.Handle(mux, func(ctx context.Context, r *bus.Request, m Greet) (Greeting, error) {
		got <- r.Header(bus.HeaderTraceParent)
		return Greeting{}, nil
	})
	require.NoError(t, b.Register(t.Context(), "greeter", mux))
	_, err := bus.Call[Greeting](bus.WithTraceContext(t.Context(), parentA, ""), a, bus.ServiceID("greeter", b.Node()), Greet{Name: "x"}, bus.WithTimeout(5*time.Second))
	require.NoError(t, err)
	assert.Equal(t, parentB, <-got, "the call span's trace context")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.spans, 2)
	assert.Equal(t, bus.OpCall, rec.spans[0].Op)
	assert.Equal(t, bus.ServiceID("greeter", b.Node()), rec.spans[0].ServiceID)
	assert.Equal(t, "example.v1.Greet", rec.spans[0].Type)
	assert.Equal(t, a.Node(), rec.spans[0].Node)
	assert.Equal(t, bus.OpHandle, rec.spans[1].Op)
	assert.Equal(t, b.Node(), rec.spans[1].Node)
	assert.Equal(t, 2, rec.ended)
}

// TestTraceContextOfAnEvent: a subscriber's ctx carries the
// broadcaster's trace context.
func TestTraceContextOfAnEvent(t *testing.T) {
	a, b, _ := pair(t, bus.Config{})
	got := make(chan string, 1)
	_, err := bus.Subscribe(b, func(ctx context.Context, ev HostAdded) {
		tp, _ := bus.TraceContextFrom(ctx)
		got <- tp
	})
	require.NoError(t, err)
	require.NoError(t, a.Broadcast(bus.WithTraceContext(t.Context(), parentA, ""), HostAdded{}))
	select {
	case tp := <-got:
		assert.Equal(t, parentA, tp)
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
	}
}

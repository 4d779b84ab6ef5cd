package bus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// TestReplyToMustBeAReplyQueue: a request whose reply-to names a service
// queue or api.portal is dropped unrun, so a reply can never be used to
// write into another queue with the replying node's rights; one naming a
// reply queue of the prefix, or a broker-named queue, runs and is
// answered.
func TestReplyToMustBeAReplyQueue(t *testing.T) {
	a, b, net := pair(t, bus.Config{})
	var runs atomic.Int32
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		runs.Add(1)
		return Greeting{Text: "hi"}, nil
	})))
	victimQueue := busx.Of(a).QueueName(bus.ServiceID("victim", message.NewUUID()))
	raw := net.Transport("raw")
	t.Cleanup(func() { _ = raw.Close() })
	ctx := t.Context()
	for _, q := range []string{victimQueue, busx.Of(a).QueueName(bus.APIPortal), "amq.gen-ok", "cloudbus.reply.ok"} {
		require.NoError(t, raw.DeclareQueue(ctx, q, driver.QueueOptions{Kind: driver.QueueDurable}))
	}
	body, err := json.Marshal(Greet{Name: "x"})
	require.NoError(t, err)
	send := func(replyTo string) {
		env := &wire.Envelope{ID: message.NewUUID(), Kind: wire.KindRequest, Type: "example.v1.Greet",
			ServiceID: bus.ServiceID("svc", b.Node()), ReplyTo: replyTo, CorrelationID: message.NewUUID(), Body: body, Timeout: 5 * time.Second}
		data, err := wire.EncodeEnvelope(env, 0)
		require.NoError(t, err)
		require.NoError(t, raw.Publish(ctx, busx.Of(b).QueueName(env.ServiceID), data))
	}
	depth := func(q string) int {
		info, ok := net.Queue(q)
		require.True(t, ok, "queue %s exists", q)
		return info.Ready
	}
	for _, bad := range []string{victimQueue, busx.Of(a).QueueName(bus.APIPortal), bus.APIPortal, "amq.gen-", "cloudbus.reply."} {
		send(bad)
	}
	send("amq.gen-ok")
	send("cloudbus.reply.ok")
	require.Eventually(t, func() bool { return depth("amq.gen-ok") == 1 && depth("cloudbus.reply.ok") == 1 }, 5*time.Second, time.Millisecond,
		"requests with reply queues are answered")
	assert.Equal(t, int32(2), runs.Load(), "only the requests with a reply queue ran")
	assert.Zero(t, depth(victimQueue), "nothing was written into a service queue")
	assert.Zero(t, depth(busx.Of(a).QueueName(bus.APIPortal)), "nothing was written into api.portal")
	assert.True(t, bus.ValidReplyTo(b, "cloudbus.reply."+message.NewUUID()))
	assert.False(t, bus.ValidReplyTo(b, "cloudbus.reply.a b"), "no spaces or control characters")
	assert.True(t, bus.ValidReplyTo(b, "cloudbus.reply."+strings.Repeat("x", 240)), "255 bytes")
	assert.False(t, bus.ValidReplyTo(b, "cloudbus.reply."+strings.Repeat("x", 241)), "at most 255 bytes")
}

// TestUndecodableRequestIsAnswered: a request the receiver cannot decode
// (here an invalid resource UUID, a newer protocol, too large, a negative timeout, a malformed
// type name, a header that is not a string) is answered with a typed
// error at its reply queue, not with silence.
func TestUndecodableRequestIsAnswered(t *testing.T) {
	_, b, net := pair(t, bus.Config{})
	var runs atomic.Int32
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		runs.Add(1)
		return nil, nil
	})))
	raw := net.Transport("raw")
	t.Cleanup(func() { _ = raw.Close() })
	ctx := t.Context()
	replyTo := "cloudbus.reply.raw-client"
	require.NoError(t, raw.DeclareQueue(ctx, replyTo, driver.QueueOptions{Kind: driver.QueueTemporary}))
	replies := make(chan *wire.Envelope, 16)
	_, err := raw.Consume(ctx, replyTo, driver.ConsumeOptions{Prefetch: 16}, func(d driver.Delivery) {
		_ = d.Ack()
		env, err := wire.DecodeEnvelope(d.Body(), 0)
		if err == nil {
			replies <- env
		}
	})
	require.NoError(t, err)
	queue := busx.Of(b).QueueName(bus.ServiceID("svc", b.Node()))
	base := `"id":"` + message.NewUUID() + `","kind":"request","service_id":"svc.` + b.Node() + `","reply_to":"` + replyTo + `"`
	cases := map[string]struct {
		json string
		code message.Code
	}{
		"invalid resource": {`{` + base + `,"correlation_id":"c1","type":"example.v1.Greet","resource_uuid":"ABCDEF0123456789ABCDEF012345678","body":{}}`, message.ErrInvalidUUID.Code},
		"newer protocol":   {`{"protocol":2,` + base + `,"correlation_id":"c5","type":"example.v1.Greet","body":{}}`, message.ErrBadRequest.Code},
		"reserved header":  {`{` + base + `,"correlation_id":"c7","type":"example.v1.Greet","headers":{"cloudbus-drain":"x"},"body":{}}`, message.ErrBadRequest.Code},
		// Over the 4 MiB limit: the reply address comes before the body.
		"too large":           {`{` + base + `,"correlation_id":"c6","type":"example.v1.Greet","body":{"name":"` + strings.Repeat("x", 5<<20) + `"}}`, message.ErrTooLarge.Code},
		"negative timeout":    {`{` + base + `,"correlation_id":"c2","type":"example.v1.Greet","timeout_ns":-5,"body":{}}`, message.ErrBadRequest.Code},
		"malformed type":      {`{` + base + `,"correlation_id":"c3","type":"no spaces allowed","body":{}}`, message.ErrBadRequest.Code},
		"header not a string": {`{` + base + `,"correlation_id":"c4","type":"example.v1.Greet","headers":{"h":1},"body":{}}`, message.ErrBadRequest.Code},
	}
	for _, c := range cases {
		require.NoError(t, raw.Publish(ctx, queue, []byte(c.json)))
	}
	got := map[string]message.Code{}
	for range cases {
		select {
		case env := <-replies:
			require.NotNil(t, env.Error)
			got[env.CorrelationID] = env.Error.Code
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of %d refused requests were answered: %v", len(got), len(cases), got)
		}
	}
	for name, c := range cases {
		var corr string
		_ = json.Unmarshal([]byte(c.json), &struct {
			C *string `json:"correlation_id"`
		}{&corr})
		assert.Equal(t, c.code, got[corr], name)
	}
	assert.Zero(t, runs.Load(), "no refused request ran")
}

// TestReplyNeverTooLarge: a request whose headers alone bring it near the
// size limit, echoed into its reply, would make the reply too large; the
// caller gets a typed error reply, not a timeout.
func TestReplyNeverTooLarge(t *testing.T) {
	const limit = 64 << 10
	a, b, _ := pair(t, bus.Config{Limits: bus.Limits{MaxMessageSize: limit}})
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		return Greeting{Text: strings.Repeat("r", 8<<10)}, nil
	})))
	// The largest header the request can carry: its reply, headers
	// echoed, does not fit even without a body.
	for h := limit - 100; h > limit-2000; h -= 10 {
		start := time.Now()
		_, err := bus.Call[any](t.Context(), a, bus.ServiceID("svc", b.Node()), Greet{Name: "x"}, bus.WithHeader("big", strings.Repeat("h", h)), bus.WithTimeout(5*time.Second))
		if message.CodeOf(err) == message.ErrTooLarge.Code {
			continue // the request itself does not fit: a smaller header
		}
		require.Error(t, err)
		assert.False(t, errors.Is(err, message.ErrTimeout), "a typed error, not a timeout, with a %d-byte header: %v", h, err)
		assert.ErrorIs(t, err, message.ErrInternal)
		assert.Less(t, time.Since(start), 2*time.Second)
		return
	}
	t.Fatal("no header size let the request through")
}

// TestLargeDeliveryReturnsMemory: a delivery of a megabyte or more arms
// one return of free memory to the OS (after releaseDelay); a burst arms
// it once; Close cancels a pending one without waiting for it.
func TestLargeDeliveryReturnsMemory(t *testing.T) {
	_, b, net := pair(t, bus.Config{})
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		return nil, nil
	})))
	raw := net.Transport("raw")
	t.Cleanup(func() { _ = raw.Close() })
	queue := busx.Of(b).QueueName(bus.ServiceID("svc", b.Node()))
	require.False(t, b.MemoryReleasePending())
	require.NoError(t, raw.Publish(t.Context(), queue, []byte(`{"kind":"send"}`)))
	require.Never(t, b.MemoryReleasePending, 50*time.Millisecond, 5*time.Millisecond, "a small message arms nothing")
	for range 3 {
		require.NoError(t, raw.Publish(t.Context(), queue, bytes.Repeat([]byte("x"), 2<<20)))
	}
	require.Eventually(t, b.MemoryReleasePending, 2*time.Second, 5*time.Millisecond, "a large message arms a release")
	require.Eventually(t, func() bool { return !b.MemoryReleasePending() }, 5*time.Second, 10*time.Millisecond, "the release ran")

	require.NoError(t, raw.Publish(t.Context(), queue, bytes.Repeat([]byte("x"), 2<<20)))
	require.Eventually(t, b.MemoryReleasePending, 2*time.Second, 5*time.Millisecond)
	start := time.Now()
	require.NoError(t, b.Close())
	assert.Less(t, time.Since(start), time.Second, "Close does not wait for a pending release")
	assert.False(t, b.MemoryReleasePending())
}

// TestLargeDeliveryReturnsMemoryAfterItsHandler: a release that ran while
// a slow handler still held a large body is not the last one; the end of
// the handling arms another, so an idle node does not keep the heap.
func TestLargeDeliveryReturnsMemoryAfterItsHandler(t *testing.T) {
	a, b, _ := pair(t, bus.Config{})
	running, finish := make(chan struct{}), make(chan struct{})
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		close(running)
		<-finish
		return nil, nil
	})))
	require.NoError(t, a.Send(t.Context(), bus.ServiceID("svc", b.Node()), Greet{Name: strings.Repeat("x", 2<<20)}))
	<-running
	require.Eventually(t, b.MemoryReleasePending, 2*time.Second, 5*time.Millisecond, "the delivery arms a release")
	require.Eventually(t, func() bool { return !b.MemoryReleasePending() }, 5*time.Second, 10*time.Millisecond,
		"the release armed at the delivery ran while the handler held the body")
	close(finish)
	require.Eventually(t, b.MemoryReleasePending, 2*time.Second, 5*time.Millisecond, "the end of the handling arms another")
	require.Eventually(t, func() bool { return !b.MemoryReleasePending() }, 10*time.Second, 10*time.Millisecond, "and it runs")
}

package bus_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seen is what a handler saw of one request.
type seen struct {
	id, correlation, name, retry string
}

// recordingHandler replies Greeting{Text: name} to Greet and reports
// every request on the returned channel.
func recordingHandler() (bus.Handler, <-chan seen) {
	ch := make(chan seen, 16)
	return handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		g := r.Payload.(*Greet)
		ch <- seen{id: r.ID(), correlation: busx.EnvelopeOf(r).CorrelationID, name: g.Name, retry: r.Header(bus.HeaderRetry)}
		return Greeting{Text: g.Name}, nil
	}), ch
}

func next(t *testing.T, ch <-chan seen) seen {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("the handler saw nothing within 5 s")
		return seen{}
	}
}

// dashed spells a canonical UUID in the dashed form.
func dashed(id string) string {
	return id[:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:]
}

func TestWithIDSetsTheMessageID(t *testing.T) {
	a, b, _ := pair(t, bus.Config{})
	h, got := recordingHandler()
	require.NoError(t, b.Register(t.Context(), "svc", h))
	id := message.NewUUID()

	_, err := bus.Call[any](t.Context(), a, b.LocalID("svc"), Greet{Name: "call"}, bus.WithID(strings.ToUpper(dashed(id))))
	require.NoError(t, err)
	s := next(t, got)
	assert.Equal(t, id, s.id, "the handler sees the id given with WithID, normalized")
	assert.NotEqual(t, id, s.correlation, "the reply is matched by a correlation id of the call's own")

	require.NoError(t, a.Send(t.Context(), b.LocalID("svc"), Greet{Name: "send"}, bus.WithID(id)))
	assert.Equal(t, id, next(t, got).id, "Send keeps the id too")

	_, err = bus.Call[any](t.Context(), a, b.LocalID("svc"), Greet{Name: "fresh"})
	require.NoError(t, err)
	s = next(t, got)
	assert.True(t, message.IsCanonicalUUID(s.id), "without WithID: a fresh canonical UUID, got %q", s.id)
	assert.NotEqual(t, id, s.id)
}

func TestWithIDMalformedFailsBeforeSending(t *testing.T) {
	a, b, _ := pair(t, bus.Config{})
	h, got := recordingHandler()
	require.NoError(t, b.Register(t.Context(), "svc", h))
	for _, bad := range []string{"", "not-a-uuid", message.NewUUID() + "0"} {
		_, err := bus.Call[any](t.Context(), a, b.LocalID("svc"), Greet{Name: "bad"}, bus.WithID(bad))
		assert.ErrorIs(t, err, message.ErrInvalidUUID, "Call with WithID(%q)", bad)
		err = a.Send(t.Context(), b.LocalID("svc"), Greet{Name: "bad"}, bus.WithID(bad))
		assert.ErrorIs(t, err, message.ErrInvalidUUID, "Send with WithID(%q)", bad)
		_, err = busx.Apply([]bus.Option{bus.WithID(bad)}).MessageID()
		assert.ErrorIs(t, err, message.ErrInvalidUUID, "IDOf(WithID(%q))", bad)
	}
	assert.Zero(t, a.Stats().Pending)
	// One queue, one sender: had anything been sent, the handler would
	// see it before this.
	require.NoError(t, a.Send(t.Context(), b.LocalID("svc"), Greet{Name: "good"}))
	assert.Equal(t, "good", next(t, got).name, "nothing was sent for a malformed id")
}

func TestIDOfAndRetryOf(t *testing.T) {
	id := message.NewUUID()
	got, err := busx.Apply([]bus.Option{}).MessageID()
	require.NoError(t, err)
	assert.Empty(t, got, "no WithID: the bus picks a fresh id")
	got, err = busx.Apply([]bus.Option{bus.WithTimeout(time.Second), bus.WithID(dashed(id))}).MessageID()
	require.NoError(t, err)
	assert.Equal(t, id, got)

	n, err := busx.Apply([]bus.Option{bus.WithHeader("k", "v")}).Retries()
	require.NoError(t, err)
	assert.Zero(t, n)
	n, err = busx.Apply([]bus.Option{bus.WithRetry(3)}).Retries()
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	for _, bad := range []int{0, -1} {
		_, err = busx.Apply([]bus.Option{bus.WithRetry(bad)}).Retries()
		assert.ErrorIs(t, err, message.ErrBadRequest, "WithRetry(%d)", bad)
	}
}

// TestCallsSharingAnIDEachGetTheirReply: two concurrent calls with one
// message id are both in their handler at once, and each gets its own
// reply.
func TestCallsSharingAnIDEachGetTheirReply(t *testing.T) {
	a, b, _ := pair(t, bus.Config{})
	var arrived sync.WaitGroup
	arrived.Add(2)
	both := make(chan struct{})
	go func() { arrived.Wait(); close(both) }()
	var mu sync.Mutex
	correlations := map[string]bool{}
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		mu.Lock()
		correlations[busx.EnvelopeOf(r).CorrelationID] = true
		mu.Unlock()
		arrived.Done()
		select {
		case <-both: // reply only once both calls are pending
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return Greeting{Text: r.Payload.(*Greet).Name}, nil
	})))
	id := message.NewUUID()
	var wg sync.WaitGroup
	for _, name := range []string{"first", "second"} {
		wg.Go(func() {
			got, err := bus.Call[Greeting](t.Context(), a, b.LocalID("svc"), Greet{Name: name}, bus.WithID(id), bus.WithTimeout(5*time.Second))
			assert.NoError(t, err, name)
			assert.Equal(t, name, got.Text, "each call gets its own reply")
		})
	}
	wg.Wait()
	assert.Len(t, correlations, 2, "each call has its own correlation id")
	assert.Zero(t, a.Stats().Pending)
	assert.Zero(t, a.Stats().LateReplies)
}

// TestRetryIgnoresTheLateReplyOfAnEarlierAttempt: a call times out, its
// retry with the same id is pending when the first attempt's reply
// arrives: that reply is dropped as late, and the retry gets its own.
func TestRetryIgnoresTheLateReplyOfAnEarlierAttempt(t *testing.T) {
	a, b, _ := pair(t, bus.Config{})
	release := make(chan struct{})  // lets the first attempt reply
	lateSeen := make(chan struct{}) // lets the second attempt reply
	inFirst := make(chan struct{})  // the first attempt is in its handler
	inSecond := make(chan struct{}) // the second attempt is in its handler
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		name := r.Payload.(*Greet).Name
		wait := release
		if name == "first" {
			close(inFirst)
		} else {
			close(inSecond)
			wait = lateSeen
		}
		// Not on ctx: the first attempt's deadline has passed when it is
		// released, and its reply must still be sent.
		select {
		case <-wait:
		case <-done: // a failed test ends
			return nil, message.ErrCanceled
		}
		return Greeting{Text: name}, nil
	})))
	id := message.NewUUID()
	// Long enough for the handler to start on a loaded machine (a message
	// that arrives after its deadline is refused, never run).
	_, err := bus.Call[any](t.Context(), a, b.LocalID("svc"), Greet{Name: "first"}, bus.WithID(id), bus.WithTimeout(500*time.Millisecond))
	require.ErrorIs(t, err, message.ErrTimeout)
	select {
	case <-inFirst:
	default:
		t.Fatal("the first attempt never reached its handler within its 500 ms deadline")
	}

	type result struct {
		g   Greeting
		err error
	}
	second := make(chan result, 1)
	go func() {
		g, err := bus.Call[Greeting](t.Context(), a, b.LocalID("svc"), Greet{Name: "second"}, bus.WithID(id), bus.WithTimeout(5*time.Second))
		second <- result{g, err}
	}()
	select {
	case <-inSecond:
	case <-time.After(5 * time.Second):
		t.Fatal("the retry did not reach its handler")
	}
	close(release)
	require.Eventually(t, func() bool { return a.Stats().LateReplies == 1 }, 5*time.Second, time.Millisecond,
		"the first attempt's reply arrives while the retry is pending, and is dropped as late")
	close(lateSeen)
	r := <-second
	require.NoError(t, r.err)
	assert.Equal(t, "second", r.g.Text, "the retry is answered by its own reply, not by the earlier attempt's")
}

// TestWithRetryAtTheBusLevel: the bus does not retry; it carries the
// count as a header, and refuses a count below 1 before sending.
func TestWithRetryAtTheBusLevel(t *testing.T) {
	a, b, _ := pair(t, bus.Config{})
	h, got := recordingHandler()
	require.NoError(t, b.Register(t.Context(), "svc", h))

	_, err := bus.Call[any](t.Context(), a, b.LocalID("svc"), Greet{Name: "r"}, bus.WithRetry(2))
	require.NoError(t, err)
	assert.Equal(t, "2", next(t, got).retry, "WithRetry travels as the header %s", bus.HeaderRetry)
	require.NoError(t, a.Send(t.Context(), b.LocalID("svc"), Greet{Name: "s"}, bus.WithRetry(1), bus.WithHeader(bus.HeaderRetry, "9")))
	assert.Equal(t, "1", next(t, got).retry, "the option wins over a header of the same name")

	for _, bad := range []int{0, -3} {
		_, err := bus.Call[any](t.Context(), a, b.LocalID("svc"), Greet{Name: "bad"}, bus.WithRetry(bad))
		assert.ErrorIs(t, err, message.ErrBadRequest, "Call with WithRetry(%d)", bad)
		assert.ErrorIs(t, a.Send(t.Context(), b.LocalID("svc"), Greet{Name: "bad"}, bus.WithRetry(bad)), message.ErrBadRequest)
	}

	// A handler failing with not_owner or node_left: the bus does not retry.
	calls := 0
	require.NoError(t, b.Register(t.Context(), "refuses", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		calls++ // one at a time: the test calls sequentially
		return nil, message.ErrNotOwner
	})))
	_, err = bus.Call[any](t.Context(), a, b.LocalID("refuses"), Greet{}, bus.WithRetry(3))
	assert.ErrorIs(t, err, message.ErrNotOwner)
	assert.Equal(t, 1, calls, "bus.Call never retries, even with WithRetry")

	require.NoError(t, a.Send(t.Context(), b.LocalID("svc"), Greet{Name: "last"}))
	assert.Equal(t, "last", next(t, got).name, "nothing was sent for an invalid retry count")
}

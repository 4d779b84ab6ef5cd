package bustest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/message"
)

// declareQueue declares a durable queue of the scenario, deleted when the
// test ends.
func declareQueue(t *testing.T, c *cluster, tr driver.Transport, name string, opts driver.QueueOptions) string {
	t.Helper()
	q := c.prefix + "." + name
	opts.Kind = driver.QueueDurable
	require.NoError(t, tr.DeclareQueue(t.Context(), q, opts))
	t.Cleanup(func() { _ = tr.DeleteQueue(context.Background(), q) })
	return q
}

// testStateReported: a connected transport reports TransportConnected,
// and TransportClosed once closed, to State and to a watcher; a stopped
// watcher is not called again.
func testStateReported(t *testing.T, c *cluster) {
	tr := c.env.Transport(t, message.NewUUID())
	require.Equal(t, driver.TransportConnected, tr.State(), "a fresh transport is connected")
	states := watchStates(t, tr)
	var mu sync.Mutex
	stopped := false
	stop := tr.WatchState(func(driver.TransportState) {
		mu.Lock()
		defer mu.Unlock()
		assert.False(t, stopped, "bustest: a watcher was called after its stop returned")
	})
	stop()
	mu.Lock()
	stopped = true
	mu.Unlock()
	stop() // idempotent
	require.NoError(t, tr.Close())
	awaitState(t, states, driver.TransportClosed)
	assert.Equal(t, driver.TransportClosed, tr.State(), "a closed transport says so")
	assert.Error(t, tr.Publish(t.Context(), c.prefix+".any", []byte("x")), "a closed transport publishes nothing")
}

// testDeliveryCheck: Check holds for a delivery its consumer still holds,
// and fails once the consumer aborted (the broker took it back).
func testDeliveryCheck(t *testing.T, c *cluster) {
	tr := c.env.Transport(t, message.NewUUID())
	q := declareQueue(t, c, tr, "check.q", driver.QueueOptions{})
	require.NoError(t, tr.Publish(t.Context(), q, []byte("x")))
	got := make(chan driver.Delivery, 1)
	cons, err := tr.Consume(t.Context(), q, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) { got <- d })
	require.NoError(t, err)
	d := recv(t, got, 10*time.Second, "the message")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, d.Check(ctx), "a delivery its consumer holds checks")
	require.NoError(t, cons.Abort())
	assert.Error(t, d.Check(ctx), "an aborted consumer's delivery went back to the queue: Check must fail")
}

// testRelease: a released delivery comes back, keeping its attempt count,
// and releases do not count towards MaxDeliveries.
func testRelease(t *testing.T, c *cluster) {
	tr := c.env.Transport(t, message.NewUUID())
	dead := declareQueue(t, c, tr, "release.dead", driver.QueueOptions{})
	q := declareQueue(t, c, tr, "release.q", driver.QueueOptions{MaxDeliveries: 1, DeadLetter: dead})
	attempts := make(chan string, 8)
	runs := 0 // handle calls of one consumer do not overlap
	_, err := tr.Consume(t.Context(), q, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) {
		attempts <- d.Header(driver.HeaderAttempts)
		runs++
		switch runs {
		case 1:
			_ = d.Retry(2)
		case 2, 3:
			_ = d.Release()
		default:
			_ = d.Ack()
		}
	})
	require.NoError(t, err)
	require.NoError(t, tr.Publish(t.Context(), q, []byte("job")))
	var seen []string
	for range 4 {
		seen = append(seen, recv(t, attempts, 10*time.Second, "delivery of the released message"))
	}
	assert.Equal(t, []string{"", "2", "2", "2"}, seen, "a release keeps the attempt count and does not count towards MaxDeliveries (1)")
	eventually(t, 10*time.Second, "nothing went to the dead-letter queue", func() bool {
		return tr.DeleteQueueIfIdle(t.Context(), dead) == nil
	})
}

// testAbort: an aborted consumer's unsettled deliveries are back in the
// queue by the time Abort returns, so the queue cannot be deleted as idle
// in between, and settling them later has no effect.
func testAbort(t *testing.T, c *cluster) {
	tr := c.env.Transport(t, message.NewUUID())
	q := declareQueue(t, c, tr, "abort.q", driver.QueueOptions{})
	ctx := t.Context()
	require.NoError(t, tr.Publish(ctx, q, []byte("1")))
	require.NoError(t, tr.Publish(ctx, q, []byte("2")))
	held := make(chan driver.Delivery, 2)
	cons, err := tr.Consume(ctx, q, driver.ConsumeOptions{Prefetch: 2}, func(d driver.Delivery) { held <- d })
	require.NoError(t, err)
	first := recv(t, held, 10*time.Second, "the first message")
	recv(t, held, 10*time.Second, "the second message")

	janitor := c.env.Transport(t, message.NewUUID())
	require.NoError(t, cons.Abort())
	require.ErrorIs(t, janitor.DeleteQueueIfIdle(ctx, q), message.ErrBusy, "bustest: the queue looked idle right after Abort: the deliveries it held would be lost")
	_ = first.Ack() // no effect: the delivery went back

	again := make(chan driver.Delivery, 2)
	_, err = janitor.Consume(ctx, q, driver.ConsumeOptions{Prefetch: 2}, func(d driver.Delivery) { again <- d; _ = d.Ack() })
	require.NoError(t, err)
	seen := map[string]bool{}
	for range 2 {
		d := recv(t, again, 10*time.Second, "aborted delivery back in the queue")
		assert.True(t, d.Redelivered(), "an aborted delivery comes back redelivered")
		seen[string(d.Body())] = true
	}
	assert.Equal(t, map[string]bool{"1": true, "2": true}, seen, "both held deliveries came back, the one acknowledged after the abort too")
}

// testAbortAfterCancel: Abort after Cancel gives back what the cancelled
// consumer still holds: a bus's Close does so for the consumers its drain
// cancelled, ending a handler's settlement that waits for a broker that
// does not answer.
func testAbortAfterCancel(t *testing.T, c *cluster) {
	tr := c.env.Transport(t, message.NewUUID())
	q := declareQueue(t, c, tr, "abortcancel.q", driver.QueueOptions{})
	ctx := t.Context()
	require.NoError(t, tr.Publish(ctx, q, []byte("held")))
	held := make(chan driver.Delivery, 1)
	cons, err := tr.Consume(ctx, q, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) { held <- d })
	require.NoError(t, err)
	d := recv(t, held, 10*time.Second, "the message")
	require.NoError(t, cons.Cancel())
	require.NoError(t, cons.Abort())
	_ = d.Ack() // no effect: the delivery went back

	again := make(chan string, 1)
	other, err := c.env.Transport(t, message.NewUUID()).Consume(ctx, q, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) {
		again <- string(d.Body())
		_ = d.Ack()
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Cancel() })
	assert.Equal(t, "held", recv(t, again, 10*time.Second, "the message the cancelled consumer held, after its Abort"))
}

// testNonBlockingConsumer: a consumer that declares its handler
// non-blocking (driver.ConsumeOptions.NonBlocking; membus then calls it
// on the publisher's goroutine) still gets its messages one call at a
// time and each sender's in the order sent, with two senders publishing
// at once and the handler publishing into its own queue.
func testNonBlockingConsumer(t *testing.T, c *cluster) {
	ctx := t.Context()
	consumerTr := c.env.Transport(t, message.NewUUID())
	q := declareQueue(t, c, consumerTr, "nonblocking.q", driver.QueueOptions{})
	const perSender, every = 200, 10
	want := 2*perSender + 2*perSender/every
	var (
		mu      sync.Mutex
		running int
		overlap int
		last    = map[string]int{}
		order   []string // out-of-order arrivals
		seen    int
		all     = make(chan struct{})
	)
	_, err := consumerTr.Consume(ctx, q, driver.ConsumeOptions{Prefetch: 8, NonBlocking: true}, func(d driver.Delivery) {
		mu.Lock()
		running++
		if running > 1 {
			overlap++
		}
		body := string(d.Body())
		sender := body[:2] // "a-", "b-", or "c-a", "c-b" for the handler's
		if sender == "c-" {
			sender = body[:3]
		}
		n, _ := strconv.Atoi(body[len(sender):])
		if prev, ok := last[sender]; ok && n <= prev {
			order = append(order, fmt.Sprintf("%s after %s%05d", body, sender, prev))
		}
		last[sender] = n
		mu.Unlock()
		if body[0] != 'c' && n%every == 0 {
			// Into its own queue, from its own handler: it must wait
			// for this call to end.
			assert.NoError(t, consumerTr.Publish(context.Background(), q, fmt.Appendf(nil, "c-%c%05d", body[0], n)))
		}
		_ = d.Ack()
		mu.Lock()
		running--
		seen++
		if seen == want {
			close(all)
		}
		mu.Unlock()
	})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for _, sender := range []byte{'a', 'b'} {
		tr := c.env.Transport(t, message.NewUUID())
		wg.Go(func() {
			for i := range perSender {
				if !assert.NoError(t, tr.Publish(ctx, q, fmt.Appendf(nil, "%c-%05d", sender, i))) {
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("bustest: %d of %d messages handled within 30s", seen, want)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, overlap, "bustest: calls of one consumer's handler overlapped")
	assert.Empty(t, order, "bustest: a sender's messages were handled out of order")
}

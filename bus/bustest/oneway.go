package bustest

import (
	"context"
	"encoding/json"
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

// One-way messages are kept until they run: the scenarios of the rule in
// the bus package's documentation ("Delivery guarantees").

// failing is a handler of Echo that fails with the next of its codes
// (none left: it succeeds) and counts its runs.
type failing struct {
	codes []message.Code
	ran   atomic.Int32
	done  chan int // the Seq of each success
}

func newFailing(codes ...message.Code) *failing {
	return &failing{codes: codes, done: make(chan int, 16)}
}

func (f *failing) Handle(ctx context.Context, r *bus.Request) (any, error) {
	n := int(f.ran.Add(1))
	if n <= len(f.codes) {
		return nil, message.NewError(f.codes[n-1], "bustest: injected failure")
	}
	f.done <- r.Payload.(*Echo).Seq
	return nil, nil
}

// deadLetters consumes the dead-letter queue of b with a transport of
// the scenario's environment and hands each message over.
func deadLetters(t *testing.T, c *cluster, b *node) <-chan driver.Delivery {
	out := make(chan driver.Delivery, 16)
	probe := c.env.Transport(t, message.NewUUID())
	cons, err := probe.Consume(t.Context(), b.DeadLetterQueue(), driver.ConsumeOptions{Prefetch: 4}, func(d driver.Delivery) {
		out <- d
		_ = d.Ack()
	})
	require.NoError(t, err, "consume the dead-letter queue")
	t.Cleanup(func() { _ = cons.Cancel() })
	return out
}

// noDeadLetter fails if a message reaches the dead-letter queue within
// 300 ms.
func noDeadLetter(t *testing.T, dead <-chan driver.Delivery, why string) {
	t.Helper()
	select {
	case d := <-dead:
		t.Fatalf("bustest: %s, but a message was dead-lettered: %s", why, d.Header(driver.HeaderDeadReason))
	case <-time.After(300 * time.Millisecond):
	}
}

// testOneWayRetried: a one-way message whose handler fails with errors
// that do not say the message is wrong (outcome unknown, or nothing ran)
// is given back and runs again, without counting as a failed delivery,
// until it succeeds.
func testOneWayRetried(t *testing.T, c *cluster) {
	a := c.open("", bus.Config{})
	b := c.open("", bus.Config{Limits: bus.Limits{RetryBackoff: 10 * time.Millisecond, MaxDeliveries: 1}})
	h := newFailing(message.ErrInternal.Code, message.ErrNotOwner.Code, message.ErrUnavailable.Code)
	require.NoError(t, b.Register(t.Context(), "svc", h))
	dead := deadLetters(t, c, b)

	require.NoError(t, a.Send(t.Context(), b.LocalID("svc"), Echo{Seq: 7}))
	assert.Equal(t, 7, recv(t, h.done, 10*time.Second, "the one-way message running after three failures"))
	assert.EqualValues(t, 4, h.ran.Load(), "failed three times, then ran")
	st := b.Stats()
	assert.EqualValues(t, 3, st.Retried, "each failure gave the message back for another attempt")
	assert.Zero(t, st.DeadLettered)
	assert.Zero(t, st.Failed)
	noDeadLetter(t, dead, "the attempts must not count towards MaxDeliveries (1)")
}

// testOneWayWrongEnds: a one-way message whose error says it is wrong
// (retry class never) ends at once: it is not tried again, nor
// dead-lettered, and is counted.
func testOneWayWrongEnds(t *testing.T, c *cluster) {
	a := c.open("", bus.Config{})
	b := c.open("", bus.Config{Limits: bus.Limits{RetryBackoff: 10 * time.Millisecond}})
	h := newFailing(message.ErrNotFound.Code, message.ErrNotFound.Code)
	require.NoError(t, b.Register(t.Context(), "svc", h))
	dead := deadLetters(t, c, b)

	require.NoError(t, a.Send(t.Context(), b.LocalID("svc"), Echo{Seq: 1}))
	eventually(t, 10*time.Second, "the message is counted as failed", func() bool { return b.Stats().Failed == 1 })
	noDeadLetter(t, dead, "a message that says it is wrong ends")
	assert.EqualValues(t, 1, h.ran.Load(), "a not_found is not tried again")
	assert.Zero(t, b.Stats().Retried)
}

// testOneWayAttemptsSpent: a one-way message whose handler keeps failing
// goes to the dead-letter queue once its attempts are spent, with the
// number of attempts and its last error in the reason.
func testOneWayAttemptsSpent(t *testing.T, c *cluster) {
	a := c.open("", bus.Config{})
	b := c.open("", bus.Config{Limits: bus.Limits{RetryBackoff: 10 * time.Millisecond, RetryAttempts: 3}})
	h := newFailing(message.ErrInternal.Code, message.ErrInternal.Code, message.ErrInternal.Code, message.ErrInternal.Code)
	require.NoError(t, b.Register(t.Context(), "svc", h))
	dead := deadLetters(t, c, b)

	require.NoError(t, a.Send(t.Context(), b.LocalID("svc"), Echo{Seq: 1}))
	d := recv(t, dead, 10*time.Second, "the message in the dead-letter queue")
	env, err := wire.DecodeEnvelope(d.Body(), message.DefaultMaxSize)
	require.NoError(t, err, "the dead letter is the message as sent")
	assert.Equal(t, b.LocalID("svc"), env.ServiceID)
	reason := d.Header(driver.HeaderDeadReason)
	assert.Contains(t, reason, "failed 3 times", "the reason counts the attempts")
	assert.Contains(t, reason, string(message.ErrInternal.Code), "the reason names the last error")
	assert.Equal(t, busx.Of(b).QueueName(b.LocalID("svc")), d.Header(driver.HeaderDeadQueue))
	assert.EqualValues(t, 3, h.ran.Load(), "RetryAttempts bounds the runs")
	st := b.Stats()
	assert.EqualValues(t, 2, st.Retried)
	assert.EqualValues(t, 1, st.DeadLettered)
}

// testOneWayDeadline: a one-way message is tried again only within its
// deadline; then it goes to the dead-letter queue, whose reason says so.
func testOneWayDeadline(t *testing.T, c *cluster) {
	clock := bus.LocalClock()
	a := c.open("", bus.Config{Clock: clock})
	b := c.open("", bus.Config{Clock: clock, Limits: bus.Limits{RetryBackoff: 50 * time.Millisecond, RetryBackoffMax: 50 * time.Millisecond, RetryAttempts: 1000}})
	codes := make([]message.Code, 1000)
	for i := range codes {
		codes[i] = message.ErrInternal.Code
	}
	h := newFailing(codes...)
	require.NoError(t, b.Register(t.Context(), "svc", h))
	dead := deadLetters(t, c, b)

	const timeout = 500 * time.Millisecond
	sent := time.Now()
	require.NoError(t, a.Send(t.Context(), b.LocalID("svc"), Echo{Seq: 1}, bus.WithTimeout(timeout)))
	d := recv(t, dead, 10*time.Second, "the message in the dead-letter queue")
	assert.Less(t, time.Since(sent), timeout+2*time.Second, "dead-lettered by its deadline")
	assert.Contains(t, d.Header(driver.HeaderDeadReason), "deadline", "the reason says the deadline ended it")
	assert.Greater(t, h.ran.Load(), int32(2), "tried again while its deadline allowed")
}

// testOneWayLateDeadLettered: a one-way message whose deadline passed
// while it waited in its queue is not run but moved to the dead-letter
// queue, not dropped.
func testOneWayLateDeadLettered(t *testing.T, c *cluster) {
	clock := bus.LocalClock()
	a, b := c.open("", bus.Config{Clock: clock}), c.open("", bus.Config{Clock: clock})
	h := newFailing()
	ctx := t.Context()
	require.NoError(t, b.Register(ctx, "svc", h))
	id := b.LocalID("svc")
	require.NoError(t, busx.Of(b).Unregister(ctx, id, false), "the queue stays, with no consumer")
	dead := deadLetters(t, c, b)

	const timeout = 200 * time.Millisecond
	require.NoError(t, a.Send(ctx, id, Echo{Seq: 1}, bus.WithTimeout(timeout)))
	time.Sleep(timeout) // the deadline passes while it waits in the queue
	require.NoError(t, b.Register(ctx, "svc", h), "a consumer comes back")
	d := recv(t, dead, 10*time.Second, "the late message in the dead-letter queue")
	assert.Contains(t, d.Header(driver.HeaderDeadReason), "deadline passed")
	assert.Zero(t, h.ran.Load(), "a late message does not run")
	assert.EqualValues(t, 1, b.Stats().Late)
}

// testRetryAndDeadLetter: the transport's Retry gives a delivery back
// with its attempt count, not counted as a failed delivery, and
// DeadLetter moves it with its reason.
func testRetryAndDeadLetter(t *testing.T, c *cluster) {
	tr := c.env.Transport(t, message.NewUUID())
	queue := c.prefix + ".message.retry.q"
	dead := c.prefix + ".retry.dead"
	ctx := t.Context()
	require.NoError(t, tr.DeclareQueue(ctx, dead, driver.QueueOptions{Kind: driver.QueueDurable}))
	require.NoError(t, tr.DeclareQueue(ctx, queue, driver.QueueOptions{Kind: driver.QueueDurable, MaxDeliveries: 1, DeadLetter: dead}))
	t.Cleanup(func() {
		_ = tr.DeleteQueue(context.Background(), queue)
		_ = tr.DeleteQueue(context.Background(), dead)
	})
	attempts := make(chan string, 8)
	_, err := tr.Consume(ctx, queue, driver.ConsumeOptions{Prefetch: 4}, func(d driver.Delivery) {
		n := d.Header(driver.HeaderAttempts)
		attempts <- n
		switch n {
		case "":
			_ = d.Retry(1)
		case "1":
			_ = d.Retry(2)
		default:
			_ = d.DeadLetter(dead, "bustest: spent")
		}
	})
	require.NoError(t, err)
	deadGot := make(chan driver.Delivery, 1)
	_, err = tr.Consume(ctx, dead, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) {
		deadGot <- d
		_ = d.Ack()
	})
	require.NoError(t, err)

	require.NoError(t, tr.Publish(ctx, queue, []byte("job")))
	var seen []string
	for range 3 {
		seen = append(seen, recv(t, attempts, 10*time.Second, "a delivery of the retried message"))
	}
	assert.Equal(t, []string{"", "1", "2"}, seen, "each retry carries its attempt count; none counted towards MaxDeliveries (1)")
	d := recv(t, deadGot, 10*time.Second, "the message in the dead-letter queue")
	assert.Equal(t, "job", string(d.Body()))
	assert.Equal(t, "bustest: spent", d.Header(driver.HeaderDeadReason))
	assert.Equal(t, queue, d.Header(driver.HeaderDeadQueue))
	select {
	case n := <-attempts:
		t.Fatalf("bustest: a dead-lettered message was delivered again (attempts %q)", n)
	case <-time.After(300 * time.Millisecond):
	}
}

// testRefusedNotSent: a message a transport cut off from the broker
// refuses before sending fails with an error matching message.ErrNotSent
// (retry-safe: nothing was delivered) and message.ErrUnavailable, for a
// Send and a Call alike, and its code on the wire is not_sent.
func testRefusedNotSent(t *testing.T, c *cluster) {
	cutter, ok := c.env.(Cutter)
	if !ok {
		t.Fatal("bustest: Features.CanCut is set but the Env does not implement bustest.Cutter")
	}
	id := message.NewUUID()
	a := c.open(id, bus.Config{})
	b := c.open("", bus.Config{})
	h := newFailing()
	require.NoError(t, b.Register(t.Context(), "svc", h))
	states := watchStates(t, a.tr)
	cutter.Cut(t, id)
	awaitState(t, states, driver.TransportReconnecting)

	sendErr := a.Send(t.Context(), b.LocalID("svc"), Echo{Seq: 1})
	_, callErr := bus.Call[any](t.Context(), a.CloudBus, b.LocalID("svc"), Echo{Seq: 2}, bus.WithTimeout(2*time.Second))
	for what, err := range map[string]error{"send": sendErr, "call": callErr} {
		require.Error(t, err, "a %s while cut off fails", what)
		assert.ErrorIs(t, err, message.ErrNotSent, "a %s refused before sending says nothing was sent: %v", what, err)
		assert.ErrorIs(t, err, message.ErrUnavailable, "and still matches unavailable: %v", err)
		assert.Equal(t, message.ErrNotSent.Code, message.CodeOf(err), "the code on the wire is not_sent: %v", err)
		assert.Equal(t, message.RetrySafe, message.CodeOf(err).Retry())
	}
	cutter.Heal(t, id)
	awaitState(t, states, driver.TransportConnected)
	assert.Zero(t, h.ran.Load(), "nothing refused ran")
	require.NoError(t, a.Send(t.Context(), b.LocalID("svc"), Echo{Seq: 3}))
	assert.Equal(t, 3, recv(t, h.done, 10*time.Second, "a send after the heal"))
}

// testCloseWhileDrained: a bus that closes while another node deletes its
// queue as soon as it is idle (a survivor draining an evicted node) loses
// nothing: the messages it held (one running, one waiting) are back in
// the queue before the queue can look idle, so the delete keeps failing.
func testCloseWhileDrained(t *testing.T, c *cluster) {
	a := c.open("", bus.Config{})
	b := c.open("", bus.Config{Limits: bus.Limits{MaxConcurrency: 1}})
	bl := newBlocker()
	ctx := t.Context()
	require.NoError(t, b.Register(ctx, "svc", bl))
	id := b.LocalID("svc")
	queue := busx.Of(b).QueueName(id)
	require.NoError(t, a.Send(ctx, id, Echo{Seq: 1}))
	require.NoError(t, a.Send(ctx, id, Echo{Seq: 2}))
	recv(t, bl.started, 10*time.Second, "the first message's handler")

	janitor := c.env.Transport(t, message.NewUUID())
	var deleted atomic.Bool
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := janitor.DeleteQueueIfIdle(context.Background(), queue); err == nil {
				deleted.Store(true)
				return
			}
		}
	}()
	require.NoError(t, b.Close())
	time.Sleep(500 * time.Millisecond) // the deleter keeps trying after the close
	close(stop)
	<-done
	require.False(t, deleted.Load(), "bustest: the queue was deleted as idle while the closing bus still held its messages: they are lost")

	got := make(chan int, 4)
	probe := c.env.Transport(t, message.NewUUID())
	_, err := probe.Consume(ctx, queue, driver.ConsumeOptions{Prefetch: 4}, func(d driver.Delivery) {
		env, err := wire.DecodeEnvelope(d.Body(), message.DefaultMaxSize)
		if err == nil {
			var e Echo
			if json.Unmarshal(env.Body, &e) == nil {
				got <- e.Seq
			}
		}
		_ = d.Ack()
	})
	require.NoError(t, err, "the queue is still there")
	seen := map[int]bool{recv(t, got, 10*time.Second, "a message back in the queue"): true}
	seen[recv(t, got, 10*time.Second, "the other message back in the queue")] = true
	assert.Equal(t, map[int]bool{1: true, 2: true}, seen, "the running and the waiting message are both back")
}

// testDeadLettersReplayed: DeadLetters lists the dead-letter queue as it
// is, removing nothing; ReplayDeadLetters sends the messages named again,
// with the time they had to run counted from now, and removes them.
func testDeadLettersReplayed(t *testing.T, c *cluster) {
	a := c.open("", bus.Config{})
	b := c.open("", bus.Config{Limits: bus.Limits{RetryBackoff: 10 * time.Millisecond, RetryAttempts: 1}})
	ctx := t.Context()
	h := newFailing(message.ErrInternal.Code, message.ErrInternal.Code)
	require.NoError(t, b.Register(ctx, "svc", h))

	none, err := b.DeadLetters(ctx, 0)
	require.NoError(t, err, "an empty dead-letter queue")
	assert.Empty(t, none)

	ids := []string{message.NewUUID(), message.NewUUID()}
	res := message.NewUUID()
	require.NoError(t, a.Send(ctx, b.LocalID("svc"), Echo{Seq: 1}, bus.WithID(ids[0]), bus.WithResource(res), bus.WithTimeout(time.Minute)))
	require.NoError(t, a.Send(ctx, b.LocalID("svc"), Echo{Seq: 2}, bus.WithID(ids[1])))
	var dls []bus.DeadLetter
	eventually(t, 10*time.Second, "both messages dead-lettered after their one attempt", func() bool {
		dls, err = b.DeadLetters(ctx, 0)
		return err == nil && len(dls) == 2
	})
	again, err := a.DeadLetters(ctx, 0)
	require.NoError(t, err)
	require.Len(t, again, 2, "listing removes nothing, from any bus")
	first := dls[0]
	if first.ID != ids[0] {
		first = dls[1]
	}
	assert.Equal(t, ids[0], first.ID)
	assert.Equal(t, "send", first.Kind)
	assert.Equal(t, b.LocalID("svc"), first.ServiceID)
	assert.Equal(t, res, first.Resource)
	assert.Equal(t, a.Node(), first.Source)
	assert.Equal(t, busx.Of(b).QueueName(b.LocalID("svc")), first.Queue)
	assert.Contains(t, first.Reason, string(message.ErrInternal.Code), "the reason names the last error")
	assert.Greater(t, first.Timeout, 50*time.Second, "the time it had to run when sent")
	assert.JSONEq(t, `{"text":"","seq":1}`, string(first.Body))
	one, err := b.DeadLetters(ctx, 1)
	require.NoError(t, err)
	assert.Len(t, one, 1, "max bounds the list")

	unknown := message.NewUUID()
	out, err := a.ReplayDeadLetters(ctx, ids[0], unknown)
	require.NoError(t, err)
	assert.Equal(t, []string{ids[0]}, out.Replayed)
	assert.Equal(t, []string{unknown}, out.Missing)
	assert.Equal(t, 1, recv(t, h.done, 10*time.Second, "the replayed message running"), "the handler fails no more: the replay succeeds")
	left, err := b.DeadLetters(ctx, 0)
	require.NoError(t, err)
	require.Len(t, left, 1, "a replayed message leaves the queue, the other stays")
	assert.Equal(t, ids[1], left[0].ID)

	_, err = a.ReplayDeadLetters(ctx)
	assert.ErrorIs(t, err, message.ErrBadRequest, "nothing named")
	_, err = a.ReplayDeadLetters(ctx, "not-a-uuid")
	assert.ErrorIs(t, err, message.ErrInvalidUUID)
	out, err = a.ReplayDeadLetters(ctx, ids[1])
	require.NoError(t, err)
	assert.Equal(t, []string{ids[1]}, out.Replayed)
	assert.Equal(t, 2, recv(t, h.done, 10*time.Second, "the second replayed message running"))
	eventually(t, 5*time.Second, "the dead-letter queue is empty", func() bool {
		dls, err := b.DeadLetters(ctx, 0)
		return err == nil && len(dls) == 0
	})
}

package amqpbus_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/rabbitcluster"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
)

// TestQueueTypeMismatch: a node declaring a queue that exists with the
// other queue type fails with ErrQueueType, naming both types, and its
// connection stays usable.
func TestQueueTypeMismatch(t *testing.T) {
	url := testenv.AMQPURL(t)
	e := &env{url: url, links: map[string][]*link{}}
	for _, c := range []struct{ first, second amqpbus.QueueType }{
		{amqpbus.QueueQuorum, amqpbus.QueueClassic},
		{amqpbus.QueueClassic, amqpbus.QueueQuorum},
	} {
		t.Run(string(c.first)+"-then-"+string(c.second), func(t *testing.T) {
			q := "amqpbus-test-type-" + message.NewUUID()[:8]
			a := e.dial(t, "a-"+q, amqpbus.Config{QueueType: c.first})
			b := e.dial(t, "b-"+q, amqpbus.Config{QueueType: c.second})
			require.NoError(t, a.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueDurable}))
			t.Cleanup(func() { _ = a.DeleteQueue(context.Background(), q) })
			err := b.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueDurable})
			require.ErrorIs(t, err, amqpbus.ErrQueueType)
			require.ErrorIs(t, err, message.ErrBadRequest)
			assert.Contains(t, err.Error(), "as a "+string(c.first)+" queue but this node declares it "+string(c.second))
			require.NoError(t, b.Publish(t.Context(), q, []byte(`{}`)), "the connection survives the refusal")
		})
	}
}

// TestIdleDeleteQuorum: DeleteQueueIfIdle on a quorum queue (which the
// broker refuses to delete conditionally) keeps a queue with a message
// and deletes an idle one, without losing the connection.
func TestIdleDeleteQuorum(t *testing.T) {
	url := testenv.AMQPURL(t)
	e := &env{url: url, links: map[string][]*link{}}
	tr := e.dial(t, "idle", amqpbus.Config{QueueType: amqpbus.QueueQuorum})
	q := "amqpbus-test-idle-" + message.NewUUID()[:8]
	ctx := t.Context()
	require.NoError(t, tr.DeclareQueue(ctx, q, driver.QueueOptions{Kind: driver.QueueDurable}))
	t.Cleanup(func() { _ = tr.DeleteQueue(context.Background(), q) })
	require.NoError(t, tr.Publish(ctx, q, []byte(`{}`)))
	require.ErrorIs(t, tr.DeleteQueueIfIdle(ctx, q), message.ErrBusy)
	got := make(chan driver.Delivery, 1)
	c, err := tr.Consume(ctx, q, driver.ConsumeOptions{}, func(d driver.Delivery) { got <- d })
	require.NoError(t, err)
	require.NoError(t, (<-got).Ack())
	require.ErrorIs(t, tr.DeleteQueueIfIdle(ctx, q), message.ErrBusy, "a queue with a consumer stays")
	require.NoError(t, c.Cancel())
	require.NoError(t, tr.DeleteQueueIfIdle(ctx, q))
	require.NoError(t, tr.DeleteQueueIfIdle(ctx, q), "a missing queue is not an error")
	assert.Equal(t, uint64(0), tr.ConnectionsLost())
	require.ErrorIs(t, tr.Publish(ctx, q, []byte(`{}`)), message.ErrNoRoute)
}

// TestRefusedPublishRetried: a publish the broker nacks (here a full
// queue with x-overflow reject-publish; on a cluster, a quorum queue
// electing its leader) is published again until the broker takes it,
// and reported sent only then; one refused until the deadline fails
// as not sent.
func TestRefusedPublishRetried(t *testing.T) {
	url := testenv.AMQPURL(t)
	e := &env{url: url, links: map[string][]*link{}}
	tr := e.dial(t, "nack", amqpbus.Config{})
	q := "amqpbus-test-nack-" + message.NewUUID()[:8]
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(q, false, false, false, false, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	require.NoError(t, err)
	defer func() { _, _ = ch.QueueDelete(q, false, false, false) }()
	require.NoError(t, tr.Publish(t.Context(), q, []byte(`{"n":1}`)))

	short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	err = tr.Publish(short, q, []byte(`{"n":2}`))
	cancel()
	// Refused until its deadline: never reported as sent. The error says
	// not sent if the deadline passed between two attempts, or outcome
	// unknown (timeout) if it passed while the last attempt waited for
	// the broker's answer.
	require.Error(t, err, "a publish refused until its deadline is not reported as sent")
	if errors.Is(err, message.ErrNotSent) {
		assert.Contains(t, err.Error(), "refused")
	} else {
		require.ErrorIs(t, err, message.ErrTimeout)
	}
	assert.Greater(t, tr.PublishesRefused(), uint64(1), "published again while refused")

	done := make(chan error, 1)
	go func() { done <- tr.Publish(t.Context(), q, []byte(`{"n":3}`)) }()
	before := tr.PublishesRefused()
	require.Eventually(t, func() bool { return tr.PublishesRefused() > before }, 5*time.Second, 5*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("a refused publish returned %v while the queue was still full", err)
	default:
	}
	d, ok, err := ch.Get(q, true) // room for one
	require.NoError(t, err)
	require.True(t, ok)
	assert.JSONEq(t, `{"n":1}`, string(d.Body))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the refused publish was not published again once the queue had room")
	}
	d, ok, err = ch.Get(q, true)
	require.NoError(t, err)
	require.True(t, ok)
	assert.JSONEq(t, `{"n":3}`, string(d.Body), "the retried publish arrived once")
}

// TestSeveralURLs: the transport connects through whichever listed
// broker answers, and when its connection is lost reconnects to the next
// one, declaring its queues there again.
func TestSeveralURLs(t *testing.T) {
	url := testenv.AMQPURL(t)
	p1, u1 := proxy.NewURL(t, url)
	p2, u2 := proxy.NewURL(t, url)
	p1.Cut() // the first listed broker is down
	tr, err := amqpbus.Dial(t.Context(), amqpbus.Config{URL: u1 + " , " + u2})
	require.NoError(t, err, "a dead broker in the list is skipped")
	t.Cleanup(func() { _ = tr.Close() })
	assert.Equal(t, amqpbus.MaskURL(u2), tr.Broker())
	assert.NotContains(t, tr.Broker(), "guest:guest", "the password is masked")
	p1.Heal()

	q := "amqpbus-test-urls-" + message.NewUUID()[:8]
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueDurable}))
	t.Cleanup(func() { _ = waitDelete(context.Background(), tr, q) })
	got := make(chan string, 4)
	_, err = tr.Consume(t.Context(), q, driver.ConsumeOptions{}, func(d driver.Delivery) {
		got <- string(d.Body())
		_ = d.Ack()
	})
	require.NoError(t, err)

	p2.Cut() // the broker in use goes: the transport moves to the other
	require.Eventually(t, func() bool { return tr.Broker() == amqpbus.MaskURL(u1) }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, tr.Publish(t.Context(), q, []byte(`"after"`)))
	select {
	case b := <-got:
		assert.Equal(t, `"after"`, b, "the consumer resumed on the other broker")
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery after moving to the other broker")
	}
	assert.Equal(t, uint64(1), tr.ConnectionsLost())
}

// TestDialAllDown: with every listed broker down, Dial fails naming each
// (masked) and matching message.ErrUnavailable.
func TestDialAllDown(t *testing.T) {
	url := testenv.AMQPURL(t)
	p1, u1 := proxy.NewURL(t, url)
	p2, u2 := proxy.NewURL(t, url)
	p1.Cut()
	p2.Cut()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := amqpbus.Dial(ctx, amqpbus.Config{URL: u1 + "," + u2, DialTimeout: 2 * time.Second})
	require.Error(t, err)
	require.True(t, errors.Is(err, message.ErrUnavailable), "%v", err)
	for _, u := range []string{u1, u2} {
		assert.Contains(t, err.Error(), amqpbus.MaskURL(u))
	}
	assert.NotContains(t, err.Error(), "guest:guest")
}

// TestTemporaryQueueRenamedOnReconnect: a transport that moves to
// another broker while the broker still holds its old connection (the
// old link blackholed, as a frozen broker node's would be) declares its
// temporary queue under a new name at once, instead of waiting for the
// broker to drop the old connection that holds the exclusive name (405
// RESOURCE_LOCKED), and consumes it there; Address names it.
func TestTemporaryQueueRenamedOnReconnect(t *testing.T) {
	url := testenv.AMQPURL(t)
	p1, u1 := proxy.NewURL(t, url)
	p2, u2 := proxy.NewURL(t, url)
	p2.Cut() // connect through p1
	tr, err := amqpbus.Dial(t.Context(), amqpbus.Config{URL: u1 + "," + u2, Heartbeat: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	p2.Heal()

	q := "amqpbus-test-temp-" + message.NewUUID()[:8]
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueTemporary}))
	assert.Equal(t, q, tr.Address(q), "first declared under its own name")
	got := make(chan string, 4)
	_, err = tr.Consume(t.Context(), q, driver.ConsumeOptions{}, func(d driver.Delivery) {
		got <- string(d.Body())
		_ = d.Ack()
	})
	require.NoError(t, err)

	p1.Stall() // the broker keeps the old connection for two heartbeats: 20 s
	start := time.Now()
	require.Eventually(t, func() bool { return tr.Broker() == amqpbus.MaskURL(u2) }, 8*time.Second, 10*time.Millisecond,
		"the transport reconnects through the other broker while the old connection still holds the queue's name")
	t.Logf("reconnected in %s", time.Since(start).Round(time.Millisecond))
	renamed := tr.Address(q)
	assert.NotEqual(t, q, renamed, "declared under a new name")
	assert.True(t, strings.HasPrefix(renamed, q+"."), "%s", renamed)
	require.NoError(t, tr.Publish(t.Context(), q, []byte(`"by name"`)), "publishing by the queue's own name reaches its new name")
	require.NoError(t, tr.Publish(t.Context(), renamed, []byte(`"by address"`)))
	for _, want := range []string{`"by name"`, `"by address"`} {
		select {
		case b := <-got:
			assert.Equal(t, want, b)
		case <-time.After(5 * time.Second):
			t.Fatalf("no delivery of %s on the renamed queue", want)
		}
	}
	require.NoError(t, tr.DeleteQueue(t.Context(), q))
	assert.Equal(t, q, tr.Address(q), "forgotten once deleted")
	p1.Heal()
}

// TestStopReturnsWhenQueueLeaderFrozen: on a RabbitMQ cluster, a quorum
// queue whose leader's broker node froze leaves basic.cancel unanswered
// (measured: over 40 s) while the consumer's own connection, to another
// broker node, stays up. Cancel and Abort return by their bound all the
// same, nothing more is handed to the stopped consumers, the connection
// stays up, and the queue serves a new consumer once the node thaws.
func TestStopReturnsWhenQueueLeaderFrozen(t *testing.T) {
	rc := rabbitcluster.FromEnv(t)
	ctx := t.Context()
	require.NoError(t, rc.WaitRunning(ctx, rc.Nodes()), "the broker cluster is whole before the test")
	urls := rc.URLs()
	q := "amqpbus-test-frozen-" + message.NewUUID()[:8]

	// Leader on node 2: client-local places it on the declaring
	// connection's node.
	raw, err := amqp.Dial(urls[1])
	require.NoError(t, err)
	rch, err := raw.Channel()
	require.NoError(t, err)
	_, err = rch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-queue-leader-locator": "client-local"})
	require.NoError(t, err)
	_ = raw.Close()
	leader, err := rc.Leader(ctx, q)
	require.NoError(t, err)
	require.Equal(t, 1, leader, "the queue's leader is on node 2")

	tr, err := amqpbus.Dial(ctx, amqpbus.Config{URL: urls[0], QueueType: amqpbus.QueueQuorum, ConnectionName: "amqpbus test frozen leader"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = rc.Thaw(dctx, 1)
		if err := waitDelete(dctx, tr, q); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	var late atomic.Int32
	var stopped atomic.Bool
	got := make(chan driver.Delivery, 16)
	handle := func(d driver.Delivery) {
		if stopped.Load() {
			late.Add(1)
		}
		got <- d
	}
	a, err := tr.Consume(ctx, q, driver.ConsumeOptions{Prefetch: 1}, handle)
	require.NoError(t, err)
	b, err := tr.Consume(ctx, q, driver.ConsumeOptions{Prefetch: 1}, handle)
	require.NoError(t, err)
	require.NoError(t, tr.Publish(ctx, q, []byte(`"before"`)))
	select {
	case d := <-got:
		require.NoError(t, d.Ack())
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery before the freeze")
	}

	require.NoError(t, rc.Freeze(ctx, 1))
	stopped.Store(true)
	for _, s := range []struct {
		name string
		stop func() error
	}{{"Cancel", a.Cancel}, {"Abort", b.Abort}} {
		start := time.Now()
		require.NoError(t, s.stop())
		took := time.Since(start)
		t.Logf("%s with the queue's leader frozen returned after %s", s.name, took.Round(time.Millisecond))
		assert.Less(t, took, 5*time.Second, "%s must not wait for a queue leader that does not answer", s.name)
	}
	require.NoError(t, rc.Thaw(ctx, 1))
	require.NoError(t, rc.WaitRunning(ctx, rc.Nodes()))

	c, err := tr.Consume(ctx, q, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) { got <- d })
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Cancel() })
	require.NoError(t, tr.Publish(ctx, q, []byte(`"after"`)))
	select {
	case d := <-got:
		assert.Equal(t, `"after"`, string(d.Body()))
		require.NoError(t, d.Ack())
	case <-time.After(30 * time.Second):
		t.Fatal("the queue serves no new consumer after the thaw")
	}
	assert.Zero(t, late.Load(), "nothing is handed to a consumer after its Cancel or Abort returned")
	assert.Zero(t, tr.ConnectionsLost(), "the consumer's connection stayed up")
}

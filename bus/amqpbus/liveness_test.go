package amqpbus_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHeartbeatMustBeWholeSeconds(t *testing.T) {
	for _, hb := range []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond} {
		_, err := amqpbus.Dial(t.Context(), amqpbus.Config{URL: "amqp://127.0.0.1:1/", Heartbeat: hb})
		require.Error(t, err, "Heartbeat %s", hb)
		assert.Contains(t, err.Error(), "whole seconds")
	}
}

// stateChanges returns a channel of tr's state changes.
func stateChanges(t *testing.T, tr *amqpbus.Transport) <-chan driver.TransportState {
	ch := make(chan driver.TransportState, 16)
	stop := tr.WatchState(func(s driver.TransportState) {
		select {
		case ch <- s:
		default:
		}
	})
	t.Cleanup(stop)
	return ch
}

func awaitState(t *testing.T, ch <-chan driver.TransportState, want driver.TransportState, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case s := <-ch:
			if s == want {
				return time.Since(start)
			}
		case <-timer.C:
			t.Fatalf("transport not %s within %s", want, within)
		}
	}
}

// TestBlackholeDetectedWithinLease: a link that silently drops every
// byte is noticed by the liveness probe within ProbeInterval +
// ProbeTimeout (1.25 s by default), well before a node's lease (2 s by
// default) and the AMQP heartbeat's three intervals, and the transport
// reconnects once the link heals.
func TestBlackholeDetectedWithinLease(t *testing.T) {
	p, u := proxy.NewURL(t, testenv.AMQPURL(t))
	e := &env{url: u, links: map[string][]*link{}}
	tr := e.dial(t, message.NewUUID(), amqpbus.Config{})
	states := stateChanges(t, tr)
	q := testQueue(t)
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueTemporary}))

	p.Stall()
	took := awaitState(t, states, driver.TransportReconnecting, 10*time.Second)
	t.Logf("a blackholed link was dropped %s after it went silent (probe every 250 ms, timeout 1 s; lease 2 s)", took.Round(time.Millisecond))
	assert.Less(t, took, 2*time.Second, "noticed within the lease")

	p.Heal()
	awaitState(t, states, driver.TransportConnected, 15*time.Second)
	require.NoError(t, tr.Publish(t.Context(), q, []byte("after")), "publishing works again, the temporary queue redeclared")
}

// TestPausedDeliveryRunsOnlyIfStillHeld: after a pause of the process,
// a delivery read before it runs only once the broker answered a round
// trip sent after the pause. Through a stalled link no answer comes: the
// delivery is not run (the broker gives it to the next consumer) and,
// after the link heals, it runs exactly once.
func TestPausedDeliveryRunsOnlyIfStillHeld(t *testing.T) {
	p, u := proxy.NewURL(t, testenv.AMQPURL(t))
	e := &env{url: u, links: map[string][]*link{}}
	tr := e.dial(t, message.NewUUID(), amqpbus.Config{})
	q := testQueue(t)
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueDurable}))
	janitor := newEnv(t).dial(t, message.NewUUID(), amqpbus.Config{})
	t.Cleanup(func() { _ = janitor.DeleteQueue(context.Background(), q) })
	got := make(chan driver.Delivery, 4)
	_, err := tr.Consume(t.Context(), q, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) { got <- d })
	require.NoError(t, err)

	// A healthy link: the check costs one round trip.
	require.NoError(t, tr.Publish(t.Context(), q, []byte("one")))
	d := recvDelivery(t, got)
	tr.SimulatePause()
	start := time.Now()
	require.NoError(t, d.Check(t.Context()), "the broker answers: the delivery is still ours")
	t.Logf("after a pause, a healthy link proved the delivery held in %s", time.Since(start).Round(time.Microsecond))
	require.NoError(t, d.Ack())

	// A link gone silent during the pause: never run.
	require.NoError(t, tr.Publish(t.Context(), q, []byte("two")))
	d = recvDelivery(t, got)
	p.Stall()
	tr.SimulatePause()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err = d.Check(ctx)
	require.Error(t, err, "no answer from the broker: the delivery may be someone else's")
	assert.ErrorIs(t, err, message.ErrUnavailable)
	p.Heal()
	again := recvDelivery(t, got)
	assert.Equal(t, "two", string(again.Body()), "the broker handed it out again once the connection was replaced")
	assert.True(t, again.Redelivered())
	require.NoError(t, again.Ack())
}

func recvDelivery(t *testing.T, ch <-chan driver.Delivery) driver.Delivery {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery within 20 s")
		return nil
	}
}

// TestBusNeverRunsAPausedDeliveryItLost: the same through the bus: a
// request read before a pause, whose connection died meanwhile, is not
// run by the paused node (Stats.Lost), and runs exactly once after the
// link heals.
func TestBusNeverRunsAPausedDeliveryItLost(t *testing.T) {
	p, u := proxy.NewURL(t, testenv.AMQPURL(t))
	e := &env{url: u, links: map[string][]*link{}}
	id := message.NewUUID()
	tr := e.dial(t, id, amqpbus.Config{Logger: testLogger(t)})
	prefix := "amqpbus-test-" + id[:8]
	b, err := bus.Open(t.Context(), bus.Config{Transport: tr, Node: id, Prefix: prefix, Clock: bus.LocalClock(), Limits: bus.Limits{MaxConcurrency: 1},
		Logger: testLogger(t)})
	require.NoError(t, err)
	janitor := newEnv(t).dial(t, message.NewUUID(), amqpbus.Config{})
	t.Cleanup(func() {
		_ = b.Close()
		_ = janitor.DeleteQueue(context.Background(), busx.Of(b).QueueName(b.LocalID("svc")))
		_ = janitor.DeleteQueue(context.Background(), b.DeadLetterQueue())
	})
	var mu sync.Mutex
	runs := map[string]int{} // envelope id -> runs
	var firstID string
	gate := make(chan struct{})
	first := make(chan struct{}, 1)
	require.NoError(t, b.Register(t.Context(), "svc", handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		mu.Lock()
		runs[r.ID()]++
		isFirst := firstID == ""
		if isFirst {
			firstID = r.ID()
		}
		mu.Unlock()
		if isFirst {
			first <- struct{}{}
			<-gate // holds the only slot: the next delivery waits on this node
		}
		return nil, nil
	})))
	secondRuns := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for id, k := range runs {
			if id != firstID {
				n += k
			}
		}
		return n
	}
	sender := newEnv(t).dial(t, message.NewUUID(), amqpbus.Config{})
	c, err := bus.Open(t.Context(), bus.Config{Transport: sender, Prefix: prefix, Clock: bus.LocalClock()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Send(t.Context(), b.LocalID("svc"), message.Empty{}))
	<-first
	require.NoError(t, c.Send(t.Context(), b.LocalID("svc"), message.Empty{}))
	require.Eventually(t, func() bool { return b.Stats().Queued == 1 }, 10*time.Second, 5*time.Millisecond, "the second message waits on the node")

	p.Stall()
	tr.SimulatePause()
	close(gate) // the slot frees; the waiting delivery must prove it is still held first
	require.Eventually(t, func() bool { return b.Stats().Lost == 1 }, 10*time.Second, 5*time.Millisecond,
		"the waiting delivery is dropped unrun once the connection is known dead")
	assert.Zero(t, secondRuns(), "the paused node did not run it")
	p.Heal()
	require.Eventually(t, func() bool { return secondRuns() >= 1 }, 20*time.Second, 10*time.Millisecond,
		"after the link healed, the broker's redelivery runs it")
	time.Sleep(500 * time.Millisecond)
	assert.Equal(t, 1, secondRuns(), "exactly once (the first message may run again: its acknowledgement died with the link)")
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestForgottenQueueNotDeclaredAgain: after a reconnect the transport
// declares again the queues declared on it, but not one it was told to
// forget (a closed bus's service queue, which survivors may have
// deleted while the link was down).
func TestForgottenQueueNotDeclaredAgain(t *testing.T) {
	p, u := proxy.NewURL(t, testenv.AMQPURL(t))
	e := &env{url: u, links: map[string][]*link{}}
	tr := e.dial(t, message.NewUUID(), amqpbus.Config{})
	states := stateChanges(t, tr)
	kept, forgotten := testQueue(t), testQueue(t)
	janitor := newEnv(t).dial(t, message.NewUUID(), amqpbus.Config{})
	for _, q := range []string{kept, forgotten} {
		require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueDurable}))
		t.Cleanup(func() { _ = janitor.DeleteQueue(context.Background(), q) })
	}
	tr.ForgetQueue(forgotten)

	p.Stall()
	awaitState(t, states, driver.TransportReconnecting, 10*time.Second)
	for _, q := range []string{kept, forgotten} {
		require.NoError(t, janitor.DeleteQueue(t.Context(), q), "another process deletes %s while the link is down", q)
	}
	p.Heal()
	awaitState(t, states, driver.TransportConnected, 15*time.Second)
	require.NoError(t, janitor.Publish(t.Context(), kept, []byte("x")), "the queue still declared on the transport is back")
	require.ErrorIs(t, janitor.Publish(t.Context(), forgotten, []byte("x")), message.ErrNoRoute, "the forgotten queue stays deleted")
	require.NoError(t, tr.DeclareQueue(t.Context(), forgotten, driver.QueueOptions{Kind: driver.QueueDurable}), "declaring it again is allowed")
	require.NoError(t, janitor.Publish(t.Context(), forgotten, []byte("x")))
}

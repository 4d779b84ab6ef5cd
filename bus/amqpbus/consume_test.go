package amqpbus_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
)

// TestCancelGivesBackWhatArrivesAfterIt: deliveries that reach a
// consumer after its Cancel are not handed to its handler but go back to
// the queue at once, where a drain sees them, while what was handed over
// stays the handler's to settle.
func TestCancelGivesBackWhatArrivesAfterIt(t *testing.T) {
	url := testenv.AMQPURL(t)
	adm, q := adminQueue(t, url)
	tr, err := amqpbus.Dial(t.Context(), amqpbus.Config{URL: url, ConnectionName: "amqpbus test give back"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	raw, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	rch, err := raw.Channel()
	require.NoError(t, err)
	ready := func() int {
		st, err := rch.QueueDeclarePassive(q, true, false, false, false, nil)
		require.NoError(t, err)
		return st.Messages
	}

	hold := make(chan struct{})
	first := make(chan driver.Delivery, 1)
	var handed atomic.Int32
	c, err := tr.Consume(t.Context(), q, driver.ConsumeOptions{Prefetch: 5}, func(d driver.Delivery) {
		if handed.Add(1) == 1 {
			first <- d
			<-hold // the others wait behind it, delivered to this process
		}
	})
	require.NoError(t, err)
	for range 5 {
		require.NoError(t, adm.Publish(t.Context(), q, []byte(`{}`)))
	}
	d1 := <-first
	require.Eventually(t, func() bool { return ready() == 0 }, 10*time.Second, 10*time.Millisecond, "all 5 delivered")

	cancelled := make(chan error, 1)
	go func() { cancelled <- c.Cancel() }()
	require.Eventually(t, func() bool {
		n, err := tr.Consumers(t.Context(), q)
		return err == nil && n == 0
	}, 10*time.Second, 10*time.Millisecond, "the broker removed the consumer")
	close(hold)
	require.Eventually(t, func() bool { return ready() == 4 }, 10*time.Second, 10*time.Millisecond,
		"the 4 not handed over are back in the queue while the first is still held")
	require.NoError(t, <-cancelled)
	assert.Equal(t, int32(1), handed.Load(), "nothing is handed over after Cancel")
	require.NoError(t, d1.Ack())
	assert.Equal(t, 4, ready())
}

// TestAbortEndsAStuckRelease: a Release whose copy the broker never
// confirms (a frozen broker node whose connection stays up) returns as
// soon as its consumer is aborted, not after PublishTimeout: a node's
// exit closes its bus by aborting its consumers, and waited 30 s per
// such release before. The broker requeues the original with the
// aborted channel, so the message is still there after the heal.
func TestAbortEndsAStuckRelease(t *testing.T) {
	p, u := proxy.NewURL(t, testenv.AMQPURL(t))
	tr, err := amqpbus.Dial(t.Context(), amqpbus.Config{URL: u, ConnectionName: "amqpbus test stuck release",
		Heartbeat: time.Minute, ProbeInterval: time.Hour, PublishTimeout: 20 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	q := testQueue(t)
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueDurable}))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		admin, err := amqpbus.Dial(ctx, amqpbus.Config{URL: testenv.AMQPURL(t), ConnectionName: "amqpbus test stuck release cleanup"})
		if err == nil {
			_ = admin.DeleteQueue(ctx, q)
			_ = admin.Close()
		}
	})
	got := make(chan driver.Delivery, 1)
	c, err := tr.Consume(t.Context(), q, driver.ConsumeOptions{Prefetch: 1}, func(d driver.Delivery) { got <- d })
	require.NoError(t, err)
	require.NoError(t, tr.Publish(t.Context(), q, []byte("held")))
	var d driver.Delivery
	select {
	case d = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery")
	}

	p.Stall()
	released := make(chan error, 1)
	go func() { released <- d.Release() }()
	select {
	case err := <-released:
		t.Fatalf("Release returned before the abort, on a stalled broker: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	begin := time.Now()
	go func() { _ = c.Abort() }()
	select {
	case err := <-released:
		took := time.Since(begin)
		t.Logf("Release returned %s after the abort: %v", took.Round(time.Millisecond), err)
		assert.Error(t, err, "the release did not happen: the broker requeues the original")
		assert.Less(t, took, 3*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("Release still waits for the stalled broker 10 s after its consumer was aborted")
	}
	p.Heal()
	// Read on a connection of its own: the stalled connection may fail
	// once its frames flow again (the broker saw them out of order).
	direct, err := amqpbus.Dial(t.Context(), amqpbus.Config{URL: testenv.AMQPURL(t), ConnectionName: "amqpbus test stuck release reader"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = direct.Close() })
	roundTripHas(t, direct, q, "held")
}

// roundTripHas consumes queue on tr and requires body among its first
// deliveries within 10 s.
func roundTripHas(t *testing.T, tr *amqpbus.Transport, queue, body string) {
	t.Helper()
	got := make(chan string, 16)
	c, err := tr.Consume(t.Context(), queue, driver.ConsumeOptions{Prefetch: 4}, func(d driver.Delivery) {
		got <- string(d.Body())
		_ = d.Ack()
	})
	require.NoError(t, err)
	defer func() { _ = c.Cancel() }()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case b := <-got:
			if b == body {
				return
			}
		case <-deadline:
			t.Fatalf("%q not delivered again after the heal", body)
		}
	}
}

package amqpbus_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFastPublishesWaitForTheBrokerToRead: fast publishes run at most
// the transport's window ahead of what the broker has been seen to read.
// Through a stalled link (the broker reads nothing, and the probe's
// timeout is long enough not to end the connection), fast publishes are
// taken until about a window of bytes waits unread; the next one waits
// and fails by its deadline, not sent. Once the link heals, the broker
// answers the probe, publishing goes on, and the queue holds every
// message taken and not the one that failed.
func TestFastPublishesWaitForTheBrokerToRead(t *testing.T) {
	const window, size = 64 << 10, 4 << 10
	defer amqpbus.SetFastWindow(window)()
	p, u := proxy.NewURL(t, testenv.AMQPURL(t))
	e := &env{url: u, links: map[string][]*link{}}
	tr := e.dial(t, message.NewUUID(), amqpbus.Config{Heartbeat: time.Minute, ProbeTimeout: time.Minute})
	q := testQueue(t)
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueDurable}))
	janitor := newEnv(t).dial(t, message.NewUUID(), amqpbus.Config{})
	t.Cleanup(func() { _ = janitor.DeleteQueue(context.Background(), q) })

	body := func(i int) []byte { return fmt.Appendf(bytes.Repeat([]byte{' '}, size), "%d", i) }
	publish := func(i int) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := tr.PublishFast(ctx, "", q, body(i))
		return time.Since(start), err
	}
	// A round trip after the declaration: the broker has read all of it.
	_, err := publish(0)
	require.NoError(t, err)
	require.NoError(t, tr.Publish(t.Context(), q, body(1)))

	p.Stall()
	taken, i := 2, 2
	var refused error
	for ; i < 4*window/size; i++ {
		took, err := publish(i)
		if err != nil {
			refused = err
			t.Logf("publish %d waited %s: %v", i, took.Round(time.Millisecond), err)
			assert.ErrorIs(t, err, message.ErrTimeout)
			assert.Contains(t, err.Error(), "not sent")
			assert.GreaterOrEqual(t, took, 250*time.Millisecond, "it waited for the broker")
			assert.Less(t, took, time.Second, "it ended by its deadline")
			break
		}
		taken++
	}
	require.Error(t, refused, "fast publishes ran more than %d KiB ahead of the broker", 4*window>>10)
	ahead := (taken - 2) * size
	t.Logf("%d fast publishes of %d KiB taken while the broker read nothing (window %d KiB)", taken-2, size>>10, window>>10)
	// Unread too: the two publishes before the stall, if no probe was
	// answered since.
	assert.GreaterOrEqual(t, ahead, window-3*size, "the window let too little through")
	assert.LessOrEqual(t, ahead, window+size, "a publish went past the window")

	p.Heal()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := publish(i + 1)
		if err == nil {
			taken++
			break
		}
		require.True(t, time.Now().Before(deadline), "publishing did not resume after the link healed: %v", err)
	}
	got := make(chan []byte, 4*window/size)
	_, err = tr.Consume(t.Context(), q, driver.ConsumeOptions{Prefetch: 64}, func(d driver.Delivery) {
		got <- d.Body()
		_ = d.Ack()
	})
	require.NoError(t, err)
	seen := map[string]bool{}
	for len(seen) < taken {
		select {
		case b := <-got:
			seen[string(bytes.TrimSpace(b))] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d of the %d messages taken", len(seen), taken)
		}
	}
	assert.False(t, seen[fmt.Sprint(i)], "the publish that failed was not sent")
	assert.True(t, seen[fmt.Sprint(i+1)], "the publish after the heal arrived")
}

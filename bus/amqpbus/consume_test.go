package amqpbus_test

import (
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/testenv"
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

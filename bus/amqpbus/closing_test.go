package amqpbus_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/message"
)

// TestAbortWhileSettlingKeepsTheConnection: acknowledgements racing a
// consumer's abort. A frame sent on a channel after its channel.close
// reaches the broker on a channel it has closed, and RabbitMQ answers
// with a connection error (504 CHANNEL_ERROR, expected 'channel.open'),
// which cost every channel of the connection (seen in CI: a node lost
// its connection while it left). Now nothing is sent on a channel once
// its closing began: the acknowledgements after it fail, and the broker
// takes those messages back. (The race is narrow: this test did not
// make the code before fail in the runs tried; it guards the order.)
func TestAbortWhileSettlingKeepsTheConnection(t *testing.T) {
	e := newEnv(t)
	tr := e.dial(t, message.NewUUID(), amqpbus.Config{})
	ctx := t.Context()
	for round := range 10 {
		q := testQueue(t) + fmt.Sprint(round)
		require.NoError(t, tr.DeclareQueue(ctx, q, driver.QueueOptions{Kind: driver.QueueTemporary}))
		const n = 100
		for i := range n {
			require.NoError(t, tr.Publish(ctx, q, fmt.Appendf(nil, "%d", i)))
		}
		got := make(chan driver.Delivery, n)
		c, err := tr.Consume(ctx, q, driver.ConsumeOptions{Prefetch: n}, func(d driver.Delivery) { got <- d })
		require.NoError(t, err)
		var ds []driver.Delivery
		for range n {
			select {
			case d := <-got:
				ds = append(ds, d)
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: %d of %d deliveries", round, len(ds), n)
			}
		}
		start, half := make(chan struct{}), make(chan struct{})
		var (
			wg    sync.WaitGroup
			acked atomic.Int32
		)
		for _, d := range ds {
			wg.Go(func() {
				<-start
				_ = d.Ack()
				if acked.Add(1) == n/2 {
					close(half)
				}
			})
		}
		close(start)
		<-half // the abort lands among the acknowledgements
		_ = c.Abort()
		wg.Wait()
	}
	// A connection error comes before the confirmation of a later publish.
	probe := testQueue(t) + "probe"
	require.NoError(t, tr.DeclareQueue(ctx, probe, driver.QueueOptions{Kind: driver.QueueTemporary}))
	require.NoError(t, tr.Publish(ctx, probe, []byte(`"probe"`)), "a publish after the rounds")
	assert.Zero(t, tr.ConnectionsLost(), "no acknowledgement racing an abort cost the connection")
}

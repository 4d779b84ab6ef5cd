package amqpbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/message"
)

// TestRefusedPublishesDoNotBreakTheTransport: the broker closes a
// publishing channel for a publish it refuses (here a missing entry,
// 404); the transport reopens it, says why in the error, and keeps
// publishing, however many such publishes came first (more than its
// publishing channels).
func TestRefusedPublishesDoNotBreakTheTransport(t *testing.T) {
	e := newEnv(t)
	node := message.NewUUID()
	tr := e.dial(t, node, amqpbus.Config{Publishers: 2})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	prefix := "cloudbus-test-entry-" + node[:8]
	queue := prefix + ".message.api.portal"
	require.NoError(t, tr.DeclareQueue(ctx, queue, driver.QueueOptions{Kind: driver.QueueDurable}))
	t.Cleanup(func() { _ = tr.DeleteQueue(context.Background(), queue) })

	for i := range 6 {
		err := tr.PublishVia(ctx, prefix+".api", queue, []byte("{}"))
		require.Error(t, err, "publish %d through a missing entry", i)
		assert.ErrorIs(t, err, message.ErrUnavailable)
		assert.Contains(t, err.Error(), "NOT_FOUND", "the error says why the broker refused")
	}
	require.NoError(t, tr.Publish(ctx, queue, []byte("{}")), "publishing works after refused publishes")

	// Once the entry exists, publishing through it works too.
	require.NoError(t, tr.DeclareEntry(ctx, prefix+".api", queue))
	require.NoError(t, tr.PublishVia(ctx, prefix+".api", queue, []byte("{}")))
	assert.Equal(t, driver.TransportConnected, tr.State())
}

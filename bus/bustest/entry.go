package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/message"
)

// testAPIEntry: api.portal sits behind the entry "<prefix>.api" and a
// ClientOnly bus calls through it; a publish through the entry to a queue
// not bound to it fails as no-route.
func testAPIEntry(t *testing.T, c *cluster) {
	server := c.open("", bus.Config{})
	require.NoError(t, busx.Of(server).RegisterShared(t.Context(), bus.APIPortal, echoHandler(server)))
	client := c.open("", bus.Config{ClientOnly: true})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	got, err := bus.Call[Echoed](ctx, client.CloudBus, bus.APIPortal, Echo{Seq: 7})
	require.NoError(t, err, "a ClientOnly bus calls api.portal through the entry")
	assert.Equal(t, 7, got.Seq)
	assert.Error(t, client.Register(ctx, "svc", echoHandler(client)), "a ClientOnly bus serves nothing")
	_, err = bus.Subscribe(client.CloudBus, func(context.Context, Echo) {})
	assert.ErrorIs(t, err, message.ErrBadRequest, "a ClientOnly bus has no event queue to subscribe with")

	// A queue that exists but is not bound to the entry.
	require.NoError(t, server.Register(ctx, "svc", echoHandler(server)))
	err = server.tr.PublishVia(ctx, busx.Of(server).APIEntry(), busx.Of(server).QueueName(bus.ServiceID("svc", server.id)), []byte("{}"))
	assert.ErrorIs(t, err, message.ErrNoRoute, "the entry reaches api.portal and nothing else")
}

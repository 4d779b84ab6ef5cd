package bus_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
)

// TestReplyToMustBeAReplyQueue: a request whose reply-to names a service
// queue or api.portal is dropped unrun, so a reply can never be used to
// write into another queue with the replying node's rights; one naming a
// reply queue of the prefix, or a broker-named queue, runs and is
// answered.
func TestReplyToMustBeAReplyQueue(t *testing.T) {
	a, b, net := pair(t, bus.Config{})
	var runs atomic.Int32
	require.NoError(t, b.Register(t.Context(), "svc", bus.HandlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		runs.Add(1)
		return Greeting{Text: "hi"}, nil
	})))
	victimQueue := a.QueueName(bus.ServiceID("victim", message.NewUUID()))
	raw := net.Transport("raw")
	t.Cleanup(func() { _ = raw.Close() })
	ctx := t.Context()
	for _, q := range []string{victimQueue, a.QueueName(bus.APIPortal), "amq.gen-ok", "cloudbus.reply.ok"} {
		require.NoError(t, raw.DeclareQueue(ctx, q, bus.QueueOptions{Kind: bus.QueueDurable}))
	}
	body, err := json.Marshal(Greet{Name: "x"})
	require.NoError(t, err)
	send := func(replyTo string) {
		env := &message.Envelope{ID: message.NewUUID(), Kind: message.KindRequest, Type: "example.v1.Greet",
			ServiceID: bus.ServiceID("svc", b.Node()), ReplyTo: replyTo, CorrelationID: message.NewUUID(), Body: body, Timeout: 5 * time.Second}
		data, err := message.EncodeEnvelope(env, 0)
		require.NoError(t, err)
		require.NoError(t, raw.Publish(ctx, b.QueueName(env.ServiceID), data))
	}
	depth := func(q string) int {
		info, ok := net.Queue(q)
		require.True(t, ok, "queue %s exists", q)
		return info.Ready
	}
	for _, bad := range []string{victimQueue, a.QueueName(bus.APIPortal), bus.APIPortal, "amq.gen-", "cloudbus.reply."} {
		send(bad)
	}
	send("amq.gen-ok")
	send("cloudbus.reply.ok")
	require.Eventually(t, func() bool { return depth("amq.gen-ok") == 1 && depth("cloudbus.reply.ok") == 1 }, 5*time.Second, time.Millisecond,
		"requests with reply queues are answered")
	assert.Equal(t, int32(2), runs.Load(), "only the requests with a reply queue ran")
	assert.Zero(t, depth(victimQueue), "nothing was written into a service queue")
	assert.Zero(t, depth(a.QueueName(bus.APIPortal)), "nothing was written into api.portal")
	assert.True(t, b.ValidReplyTo("cloudbus.reply."+message.NewUUID()))
	assert.False(t, b.ValidReplyTo("cloudbus.reply.a b"), "no spaces or control characters")
	assert.True(t, b.ValidReplyTo("cloudbus.reply."+strings.Repeat("x", 240)), "255 bytes")
	assert.False(t, b.ValidReplyTo("cloudbus.reply."+strings.Repeat("x", 241)), "at most 255 bytes")
}

package main

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/service"
)

// TestExpiredRequestsNeverRun: a client that knows no cluster time sends
// timeout_ns alone, and a node counts it from the message's arrival, so
// a request that waited in api.portal while no node ran would run
// whenever one came back, however late. docs/wire.md (sections 5 and 10)
// has such a client set the AMQP expiration property to its timeout as
// well: the broker then never delivers the request after it. Two
// AddImage requests with a 300 ms timeout_ns wait 1 s in api.portal with
// no node running; the one with an expiration never runs and gets no
// reply, the one without runs once a node starts (what the receiver's
// rule cannot prevent).
func TestExpiredRequestsNeverRun(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Timeout: 90 * time.Second})
	pc := newProcCluster(t, ctx, broker, onSQLite, "expiry")
	prefix := pc.prefix
	serve := func(label string) *child { // each node on a database of its own
		c := pc.serve(t, label, sqliteArgs("sqlite:"+filepath.Join(pc.dir, label+".db")), []string{"REFNODE_BUS=" + broker})
		require.NoError(t, c.awaitHealthy(ctx))
		return c
	}

	// A node declares api.portal and leaves: the queue stays, with no
	// consumer.
	first := serve("A1")
	require.NoError(t, first.signal(syscall.SIGTERM, 30*time.Second))

	wc := newWireClient(t, broker, "refnode expiry test", prefix+".reply.expiry")
	ch, replyQueue := wc.ch, wc.replyQueue

	const timeout = 300 * time.Millisecond
	send := func(expiration string) (image, corr string) {
		image, corr = message.NewUUID(), message.NewUUID()
		body, err := json.Marshal(api.AddImage{UUID: image, Name: "expiry"})
		require.NoError(t, err)
		data, err := wire.EncodeEnvelope(&wire.Envelope{
			Protocol: wire.ProtocolVersion, ID: message.NewUUID(), Kind: wire.KindRequest, Type: "refnode.v1.AddImage",
			ServiceID: "api.portal", ResourceUUID: image, CorrelationID: corr, ReplyTo: replyQueue, Source: "expiry-test",
			Timeout: timeout, Body: body,
		}, 0)
		require.NoError(t, err)
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, prefix+".api", prefix+".message.api.portal", true, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: data, Expiration: expiration})
		require.NoError(t, err)
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok, "the broker took the request")
		return image, corr
	}
	expiring, expiringCorr := send(strconv.FormatInt(timeout.Milliseconds(), 10))
	plain, plainCorr := send("")
	sent := time.Now()
	// The wait in the queue is the point: past the requests' timeout
	// before any node consumes api.portal again.
	time.Sleep(time.Second)

	second := serve("A2")
	t.Logf("node A2 serving %s after the requests were sent (their timeout: %s)", time.Since(sent).Round(time.Millisecond), timeout)
	cl := newClient(t, ctx, broker, prefix)

	// The request without an expiration ran, as late as the node came.
	require.NoError(t, poll(ctx, func() error {
		_, err := service.Call[api.ImageReply](ctx, cl, api.GetImage{UUID: plain})
		return err
	}), "the request without an expiration ran once a node took it")
	t.Logf("without an expiration: ran on node %s %s after it was sent; replies %q", second.label, time.Since(sent).Round(time.Millisecond), wc.replies(plainCorr))

	// The one with an expiration: never delivered, never run, never
	// answered. The node took the other one, behind it in the queue, so
	// the broker has passed it.
	_, err := service.Call[api.ImageReply](ctx, cl, api.GetImage{UUID: expiring})
	assert.ErrorIs(t, err, message.ErrNotFound, "the request with an expiration never ran")
	assert.Empty(t, wc.replies(expiringCorr), "the request with an expiration was never delivered, so never answered")
	st, err := second.status()
	require.NoError(t, err)
	assert.Zero(t, st.Bus.Late, "node A2 refused nothing as late: the broker dropped the expired request")
}

package bus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// StartVM names the resource it is about: the bus routes and checks by it.
type StartVM struct {
	VMUUID string `json:"vm_uuid"`
}

// ResourceUUID makes StartVM a message.Routed type.
func (m StartVM) ResourceUUID() string { return m.VMUUID }

// Seen is what a handler saw of its request.
type Seen struct {
	Resource, Header, Source, Node, ID, Type string
	Deadline                                 bool
	DeadlineIn                               time.Duration
}

func routedRegistry() *message.Registry {
	reg := registry()
	message.MustRegister[StartVM](reg, "example.v1.StartVM")
	message.MustRegister[Seen](reg, "example.v1.Seen")
	return reg
}

// routedPair opens two buses sharing routedRegistry; b serves "vm" with
// a handler that reports what it saw.
func routedPair(t *testing.T) (a, b *bus.CloudBus, net *membus.Network) {
	t.Helper()
	a, b, net = pair(t, bus.Config{Registry: routedRegistry()})
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, r *bus.Request, m StartVM) (Seen, error) {
		dl, ok := r.Deadline()
		ctxDL, _ := ctx.Deadline()
		assert.Equal(t, ctxDL, dl, "Request.Deadline is the handler ctx's deadline")
		return Seen{
			Resource: r.Resource(), Header: r.Header("trace"), Source: r.Source(), Node: r.Node(),
			ID: r.ID(), Type: r.Type(), Deadline: ok, DeadlineIn: time.Until(dl),
		}, nil
	})
	require.NoError(t, b.Register(t.Context(), "vm", mux))
	return a, b, net
}

func TestHandleRequestSeesTheRequest(t *testing.T) {
	a, b, _ := routedPair(t)
	vm := message.NewUUID()
	dashed := vm[:8] + "-" + vm[8:12] + "-" + vm[12:16] + "-" + vm[16:20] + "-" + vm[20:]
	got, err := bus.Call[Seen](t.Context(), a, b.LocalID("vm"), StartVM{VMUUID: dashed},
		bus.WithHeader("trace", "t-1"), bus.WithTimeout(5*time.Second))
	require.NoError(t, err)
	assert.Equal(t, vm, got.Resource, "the resource comes from the payload, canonical")
	assert.Equal(t, "t-1", got.Header)
	assert.Equal(t, a.Node(), got.Source)
	assert.Equal(t, b.Node(), got.Node)
	assert.True(t, message.IsCanonicalUUID(got.ID))
	assert.Equal(t, "example.v1.StartVM", got.Type)
	assert.True(t, got.Deadline)
	assert.InDelta(t, 5*time.Second, got.DeadlineIn, float64(time.Second), "the caller's 5 s travel with the message")
}

func TestRoutedPayloadSetsTheResource(t *testing.T) {
	a, b, _ := routedPair(t)
	vm := message.NewUUID()

	res, err := busx.ResourceOf(StartVM{VMUUID: vm}, busx.CallOptions{})
	require.NoError(t, err)
	assert.Equal(t, vm, res)
	res, err = busx.ResourceOf(Greet{Name: "x"}, busx.Apply([]bus.Option{bus.WithResource(vm)}))
	require.NoError(t, err)
	assert.Equal(t, vm, res, "a type that names no resource takes WithResource's")
	res, err = busx.ResourceOf(Greet{Name: "x"}, busx.CallOptions{})
	require.NoError(t, err)
	assert.Empty(t, res)

	got, err := bus.Call[Seen](t.Context(), a, b.LocalID("vm"), StartVM{VMUUID: vm}, bus.WithResource(vm))
	require.NoError(t, err, "WithResource naming the same resource is fine")
	assert.Equal(t, vm, got.Resource)

	_, err = bus.Call[Seen](t.Context(), a, b.LocalID("vm"), StartVM{VMUUID: vm}, bus.WithResource(message.NewUUID()))
	assert.ErrorIs(t, err, message.ErrBadRequest, "WithResource must not contradict the payload")
	_, err = bus.Call[Seen](t.Context(), a, b.LocalID("vm"), StartVM{})
	assert.ErrorIs(t, err, message.ErrBadRequest, "a routed message naming no resource is not sent")
	_, err = bus.Call[Seen](t.Context(), a, b.LocalID("vm"), StartVM{VMUUID: "not-a-uuid"})
	assert.ErrorIs(t, err, message.ErrInvalidUUID)
	assert.Zero(t, b.Stats().Rejected, "none of these reached the receiver")
}

// TestRoutedPayloadWithoutResourceIsRefused: a Routed message published
// by hand (another language, a forged message) without resource_uuid, or
// with another one, is answered bad_request and never runs.
func TestRoutedPayloadWithoutResourceIsRefused(t *testing.T) {
	_, b, net := routedPair(t)
	vm := message.NewUUID()
	for name, envRes := range map[string]string{"no resource": "", "another resource": message.NewUUID()} {
		t.Run(name, func(t *testing.T) {
			reply := rawCall(t, net, b, b.LocalID("vm"), &wire.Envelope{
				Type: "example.v1.StartVM", ResourceUUID: envRes, Body: []byte(`{"vm_uuid":"` + vm + `"}`),
			})
			require.NotNil(t, reply.Error, "the handler must not run")
			assert.ErrorIs(t, reply.Error, message.ErrBadRequest)
			assert.Contains(t, reply.Error.Error(), vm)
		})
	}
}

// rawCall publishes env to target on b's network from a transport of its
// own, bypassing every check of the sending bus, and returns the reply.
func rawCall(t *testing.T, net *membus.Network, b *bus.CloudBus, target string, env *wire.Envelope) *wire.Envelope {
	t.Helper()
	replies := make(chan *wire.Envelope, 1)
	id := message.NewUUID()
	q := strings.TrimSuffix(busx.Of(b).QueueName(bus.APIPortal), ".message.api.portal") + ".reply.raw" + id[:8]
	tr := net.Transport("raw-" + id[:8])
	t.Cleanup(func() { _ = tr.Close() })
	require.NoError(t, tr.DeclareQueue(t.Context(), q, driver.QueueOptions{Kind: driver.QueueTemporary}))
	c, err := tr.Consume(t.Context(), q, driver.ConsumeOptions{}, func(d driver.Delivery) {
		e, err := wire.DecodeEnvelope(d.Body(), 0)
		_ = d.Ack()
		if err == nil {
			replies <- e
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Cancel()
		_ = tr.DeleteQueue(context.Background(), q)
	})
	env.ID, env.Kind, env.ServiceID, env.CorrelationID, env.ReplyTo, env.Source = id, wire.KindRequest, target, id, q, "raw"
	data, err := wire.EncodeEnvelope(env, 0)
	require.NoError(t, err)
	require.NoError(t, tr.Publish(t.Context(), busx.Of(b).QueueName(target), data))
	select {
	case r := <-replies:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no reply within 5 s")
		return nil
	}
}

// TestBadReply: a reply that does not decode into the caller's type says
// the handler ran (bad_reply, retry class "ran"), not "nothing ran".
func TestBadReply(t *testing.T) {
	a, b, _ := routedPair(t)
	_, err := bus.Call[Greeting](t.Context(), a, b.LocalID("vm"), StartVM{VMUUID: message.NewUUID()})
	require.ErrorIs(t, err, message.ErrBadReply)
	assert.NotErrorIs(t, err, message.ErrUnknownMessage)
	var e *message.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, message.RetryRan, e.Code.Retry())
}

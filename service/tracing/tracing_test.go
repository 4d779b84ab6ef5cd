package tracing_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/cloudbus-go/cloudbus/service/tracing"
)

// Ping asks the owner of a resource for its node.
type Ping struct {
	Resource string `json:"resource"`
}

// Pong names the node that handled a Ping.
type Pong struct {
	Node string `json:"node"`
}

type pingService struct{ node string }

func (s *pingService) Name() string       { return "ping" }
func (s *pingService) APIMessages() []any { return []any{Ping{}} }
func (s *pingService) Start(_ context.Context, n *service.Node) error {
	s.node = n.UUID()
	return nil
}
func (s *pingService) Handle(context.Context, *bus.Request) (any, error) {
	return Pong{Node: s.node}, nil
}

// cluster starts three nodes and a client, all tracing to one recorder.
func cluster(t *testing.T) (*servicetest.Cluster, *service.Client, *tracetest.SpanRecorder, trace.Tracer) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reg := message.NewRegistry()
	message.MustRegister[Ping](reg, "tracingtest.v1.Ping")
	message.MustRegister[Pong](reg, "tracingtest.v1.Pong")
	c := servicetest.Start(t, servicetest.Options{
		Nodes:    3,
		Registry: reg,
		Services: func(int, nodekit.Env) []service.Service { return []service.Service{&pingService{}} },
		Tracer:   tracing.New(tp),
	})
	return c, c.Client(t), rec, tp.Tracer("test")
}

// span returns the one ended span named name whose cloudbus.service is
// svc ("" for any), failing the test unless there is exactly one.
func span(t *testing.T, rec *tracetest.SpanRecorder, name, svc string) sdktrace.ReadOnlySpan {
	t.Helper()
	var hit []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() != name {
			continue
		}
		if svc != "" && attr(s, "cloudbus.service") != svc {
			continue
		}
		hit = append(hit, s)
	}
	require.Len(t, hit, 1, "spans %q on %q among %s", name, svc, names(rec))
	return hit[0]
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.AsString()
		}
	}
	return ""
}

func names(rec *tracetest.SpanRecorder) []string {
	var out []string
	for _, s := range rec.Ended() {
		out = append(out, s.Name()+"@"+attr(s, "cloudbus.service"))
	}
	return out
}

// childOf asserts that child is parent's child in parent's trace.
func childOf(t *testing.T, child, parent sdktrace.ReadOnlySpan, what string) {
	t.Helper()
	assert.Equal(t, parent.SpanContext().TraceID(), child.SpanContext().TraceID(), "%s: same trace", what)
	assert.Equal(t, parent.SpanContext().SpanID(), child.Parent().SpanID(), "%s: parent link", what)
}

// TestOneTraceClientPortalOwner: a client's trace continues through its
// call, the portal's handle and forward, and the owner's handle.
func TestOneTraceClientPortalOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, cl, rec, tr := cluster(t)
		res := message.NewUUID()
		owner := c.Owner(res)
		ctx, root := tr.Start(t.Context(), "client")
		got, err := service.Call[Pong](ctx, cl, Ping{Resource: res}, bus.WithResource(res))
		root.End()
		require.NoError(t, err)
		require.Equal(t, owner, got.Node)

		rootSpan := span(t, rec, "client", "")
		call := span(t, rec, "call tracingtest.v1.Ping", bus.APIPortal)
		portal := span(t, rec, "handle tracingtest.v1.Ping", bus.APIPortal)
		fwd := span(t, rec, "forward tracingtest.v1.Ping", bus.ServiceID("ping", owner))
		handle := span(t, rec, "handle tracingtest.v1.Ping", bus.ServiceID("ping", owner))
		childOf(t, call, rootSpan, "client's call")
		childOf(t, portal, call, "portal's handle")
		childOf(t, fwd, portal, "portal's forward")
		childOf(t, handle, fwd, "owner's handle")
		assert.Equal(t, owner, attr(handle, "cloudbus.node"))
		assert.Equal(t, trace.SpanKindConsumer, handle.SpanKind())
		assert.Equal(t, trace.SpanKindClient, fwd.SpanKind())
	})
}

// TestOneTraceThroughADrain: the owner dies with the forwarded message in
// its queue; a survivor drains it to the new owner, whose handle span is
// still the portal forward's child in the client's trace.
func TestOneTraceThroughADrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, cl, rec, tr := cluster(t)
		res := message.NewUUID()
		dead := c.Owner(res)
		c.Kill(dead) // the portals' rings still name it until it is evicted
		ctx, root := tr.Start(t.Context(), "client")
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := service.Call[Pong](ctx, cl, Ping{Resource: res}, bus.WithResource(res))
		root.End()
		// The message waited in the dead node's queue until a survivor
		// drained it to the new owner: the portal's call ends with its
		// reply, or with node_left if the eviction ended it first.
		if err != nil {
			require.ErrorIs(t, err, message.ErrNodeLeft)
		}
		c.WaitGone(t, dead, time.Second)
		var handle sdktrace.ReadOnlySpan
		c.WaitFor(t, 2*time.Second, "the drained message is handled", func() bool {
			for _, s := range rec.Ended() {
				if s.Name() == "handle tracingtest.v1.Ping" && attr(s, "cloudbus.service") != bus.APIPortal {
					handle = s
					return true
				}
			}
			return false
		})
		// A drain counts what it moved once it has drained every queue of
		// the gone node, which may be after the message was handled.
		c.WaitFor(t, 2*time.Second, "the message was drained", func() bool {
			moved := 0
			for _, n := range c.Live() {
				moved += n.DrainStats().Moved
			}
			return moved >= 1
		})
		assert.NotEqual(t, dead, attr(handle, "cloudbus.node"), "handled on a survivor")
		fwd := span(t, rec, "forward tracingtest.v1.Ping", bus.ServiceID("ping", dead))
		childOf(t, handle, fwd, "new owner's handle")
		childOf(t, fwd, span(t, rec, "handle tracingtest.v1.Ping", bus.APIPortal), "portal's forward")
		assert.Equal(t, span(t, rec, "client", "").SpanContext().TraceID(), handle.SpanContext().TraceID(), "the client's trace")
	})
}

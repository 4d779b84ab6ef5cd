// Package tracing makes OpenTelemetry spans around what cloudbus does: a
// [bus.Tracer] for bus.Config, service.Config, service.ClientConfig and
// servicetest.Options. The core packages carry only the W3C trace
// context (bus.HeaderTraceParent); this package alone imports
// OpenTelemetry.
//
// Spans: "send <type>", "call <type>", "broadcast <type>", "forward
// <type>" (api.portal's forward to the owner, a one-way message moved to
// its owner) and "handle <type>", with the attributes messaging.system
// ("cloudbus"), messaging.message.id, cloudbus.message.type,
// cloudbus.service, cloudbus.node and cloudbus.resource. A handle span's
// parent is the span that sent the message, on whatever node; a send's is
// the span in its ctx (the handler's, or the caller's own).
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cloudbus-go/cloudbus/bus"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/cloudbus-go/cloudbus/service/tracing"

// Tracer is a [bus.Tracer] making OpenTelemetry spans. It is safe for
// concurrent use.
type Tracer struct {
	t trace.Tracer
}

var _ bus.Tracer = (*Tracer)(nil)

// New returns a Tracer making spans with tp; a nil tp makes none (the
// trace context still travels).
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &Tracer{t: tp.Tracer(ScopeName)}
}

// Start begins the span s describes; see [bus.Tracer].
func (t *Tracer) Start(ctx context.Context, s bus.SpanInfo) (context.Context, func(error)) {
	kind := trace.SpanKindProducer
	verb := s.Op.String()
	switch {
	case s.Op == bus.OpHandle:
		kind = trace.SpanKindConsumer
		// The parent is the sender's span, which the message named.
		ctx = remote(ctx)
	case s.Op == bus.OpCall:
		kind = trace.SpanKindClient
	}
	if s.Forward {
		verb = "forward"
	}
	if s.Op != bus.OpHandle && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = remote(ctx) // a ctx carrying only the bus's trace context
	}
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "cloudbus"),
		attribute.String("cloudbus.message.type", s.Type),
		attribute.String("cloudbus.node", s.Node),
	}
	if s.ServiceID != "" {
		attrs = append(attrs, attribute.String("cloudbus.service", s.ServiceID))
	}
	if s.ID != "" {
		attrs = append(attrs, attribute.String("messaging.message.id", s.ID))
	}
	if s.Resource != "" {
		attrs = append(attrs, attribute.String("cloudbus.resource", s.Resource))
	}
	ctx, span := t.t.Start(ctx, verb+" "+s.Type, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	if tp := c.Get(bus.HeaderTraceParent); tp != "" {
		ctx = bus.WithTraceContext(ctx, tp, c.Get(bus.HeaderTraceState))
	}
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// remote returns ctx with the bus's trace context as its remote parent
// span, if it carries one.
func remote(ctx context.Context) context.Context {
	tp, ts := bus.TraceContextFrom(ctx)
	if tp == "" {
		return ctx
	}
	c := propagation.MapCarrier{bus.HeaderTraceParent: tp}
	if ts != "" {
		c[bus.HeaderTraceState] = ts
	}
	return propagation.TraceContext{}.Extract(ctx, c)
}

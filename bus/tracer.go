package bus

import "context"

// Tracer makes spans around what the bus does, for a tracing system such
// as OpenTelemetry (package service/tracing adapts one); the bus itself
// only carries the W3C trace context ([HeaderTraceParent]).
//
// Start is called when the bus begins to send (OpSend, OpCall,
// OpBroadcast) or to handle (OpHandle) a message, from many goroutines at
// once; it must be safe for concurrent use and must not block. The ctx
// it returns is used for the operation: for a send, the bus sets the
// trace context that ctx carries ([TraceContextFrom]) on the message; for
// a handle, the handler gets it. A handler's ctx carries the incoming
// message's trace context when Start is called. end is called exactly
// once, with the operation's error or nil, when it is over.
type Tracer interface {
	// Start begins a span for the operation s describes.
	Start(ctx context.Context, s SpanInfo) (_ context.Context, end func(err error))
}

// SpanInfo describes an operation a [Tracer] traces.
type SpanInfo struct {
	// Op is OpSend, OpCall, OpBroadcast or OpHandle.
	Op Op
	// Forward is true for a send or call that passes on a message this
	// node received: api.portal's forward to the owner, or a one-way
	// message moved to its owner.
	Forward bool
	// Type is the message type name.
	Type string
	// ServiceID is the target service id (the handling one for OpHandle);
	// empty for an event.
	ServiceID string
	// Node is this bus's node UUID, or its client id.
	Node string
	// ID is the message id.
	ID string
	// Resource is the resource the message is about, if any.
	Resource string
}

// startSpan calls the configured tracer, if any.
func (b *CloudBus) startSpan(ctx context.Context, s SpanInfo) (context.Context, func(error)) {
	if b.tracer == nil {
		return ctx, func(error) {}
	}
	s.Node = b.node
	return b.tracer.Start(ctx, s)
}

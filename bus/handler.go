package bus

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	"github.com/cloudbus-go/cloudbus/message"
)

// Request is a message delivered to a [Handler].
type Request struct {
	// Envelope holds the routing fields and headers; read-only.
	Envelope *message.Envelope
	// Payload is the decoded body: a pointer to a value of the registered
	// type named by Envelope.Type.
	Payload any
	// Bus is the bus that received the message, for handlers that send
	// further messages.
	Bus *CloudBus
}

// Handler handles the messages of one service.
//
// Handle may be called concurrently for messages about different
// resources (and for messages without a resource); messages about one
// resource are handed over one at a time, in arrival order. ctx carries
// the sender's remaining deadline and is canceled when the bus closes.
// The returned value, a value of a registered type or nil, is the reply
// to a Call (it is ignored for a Send); a returned error is sent to the
// caller with its code (see message.AsError). A panic is recovered and
// answered with message.ErrInternal; the consumer keeps running. Handle
// must not keep req after it returns.
type Handler interface {
	// Handle handles one message.
	Handle(ctx context.Context, req *Request) (any, error)
}

// HandlerFunc adapts a function to [Handler].
type HandlerFunc func(ctx context.Context, req *Request) (any, error)

// Handle calls f(ctx, req).
func (f HandlerFunc) Handle(ctx context.Context, req *Request) (any, error) { return f(ctx, req) }

// Mux is a [Handler] that dispatches on the payload's Go type, so one
// service handles many message types. Register handlers before the mux
// receives messages; it is safe for concurrent use.
type Mux struct {
	mu       sync.RWMutex
	handlers map[reflect.Type]Handler
}

// NewMux returns an empty mux.
func NewMux() *Mux {
	return &Mux{handlers: make(map[reflect.Type]Handler)}
}

// HandleType routes payloads of prototype's type (a value or pointer of a
// registered type) to h, replacing any earlier handler of that type.
func (m *Mux) HandleType(prototype any, h Handler) {
	t := reflect.TypeOf(prototype)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	m.mu.Lock()
	m.handlers[t] = h
	m.mu.Unlock()
}

// Handle dispatches req to the handler of its payload's type; a type
// without handler is answered with message.ErrUnknownMessage.
func (m *Mux) Handle(ctx context.Context, req *Request) (any, error) {
	t := reflect.TypeOf(req.Payload)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	m.mu.RLock()
	h, ok := m.handlers[t]
	m.mu.RUnlock()
	if !ok {
		return nil, message.ErrUnknownMessage.WithDetails(fmt.Sprintf("service %s has no handler for %s", req.Envelope.ServiceID, req.Envelope.Type))
	}
	return h.Handle(ctx, req)
}

// Handle registers on m a typed handler for requests of type Req (a
// registered type) replying with Resp (a registered type, or a pointer to
// one; message.Empty for no result).
func Handle[Req, Resp any](m *Mux, fn func(ctx context.Context, req Req) (Resp, error)) {
	m.HandleType((*Req)(nil), TypedHandler(fn))
}

// TypedHandler wraps a typed function as a [Handler] for one service with
// one message type: a payload of another type is answered with
// message.ErrUnknownMessage.
func TypedHandler[Req, Resp any](fn func(ctx context.Context, req Req) (Resp, error)) Handler {
	return HandlerFunc(func(ctx context.Context, r *Request) (any, error) {
		p, ok := r.Payload.(*Req)
		if !ok || p == nil {
			return nil, message.ErrUnknownMessage.WithDetails(fmt.Sprintf("got %s (%T), want %T", r.Envelope.Type, r.Payload, p))
		}
		resp, err := fn(ctx, *p)
		if err != nil {
			return nil, err
		}
		return resp, nil
	})
}

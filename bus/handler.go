package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// Request is a message delivered to a [Handler]: its envelope (routing
// fields, headers), its decoded payload and the bus that received it. The
// accessor methods are the stable way to read it; a handler must treat
// the request as read-only and must not keep it after it returns.
type Request struct {
	// env holds the routing fields and headers; read-only.
	env *wire.Envelope
	// Payload is the decoded body: a pointer to a value of the registered
	// type named by Envelope.Type.
	Payload any
	// bus is the bus that received the message, for handlers that send
	// further messages.
	bus *CloudBus

	deadline time.Time // the sender's deadline on this node's clock; zero if none
}

// Resource returns the canonical UUID of the resource the message is
// about, or "" for a message about no resource. For a payload type that
// implements message.Routed the bus has checked, before the handler ran,
// that it equals the UUID the payload names.
func (r *Request) Resource() string { return r.env.ResourceUUID }

// Header returns the value of a header the sender set (WithHeader), or
// "" if it is absent.
func (r *Request) Header(key string) string { return r.env.Headers[key] }

// Source returns who sent the message: the UUID of the sending node, or
// the client id of a process that is not a node. A message forwarded by a
// node (an api.portal forwarding to the owner) names that node.
func (r *Request) Source() string { return r.env.Source }

// Node returns the UUID of the node whose bus received the message: the
// node the handler runs on.
func (r *Request) Node() string {
	if r.bus == nil {
		return ""
	}
	return r.bus.Node()
}

// ID returns the message's id (a canonical UUID). A message redelivered
// after a crash keeps its id, and so does a message its sender sent
// again with [WithID] (a retry, a forward through api.portal): a handler
// of a non-idempotent operation deduplicates by it.
func (r *Request) ID() string { return r.env.ID }

// Type returns the registered name of the payload's type, e.g.
// "refnode.v1.StartVm".
func (r *Request) Type() string { return r.env.Type }

// Deadline returns the sender's deadline as this node's clock sees it
// (the time left when the message was sent, counted from its arrival),
// and false if the sender set none. The handler's ctx carries the same
// deadline.
func (r *Request) Deadline() (time.Time, bool) { return r.deadline, !r.deadline.IsZero() }

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

// ErrRelease, returned by a handler, gives the message back to its queue
// unanswered, for another consumer (or this one, later) to take, without
// counting it towards Config.MaxDeliveries. Return it only from a
// handler that did nothing yet and cannot serve the message now while
// another node could, such as an API portal whose node is fenced; the
// caller's deadline still bounds the message.
var ErrRelease = errors.New("bus: give the message back to its queue")

// handlerFunc adapts a function to [Handler].
type handlerFunc func(ctx context.Context, req *Request) (any, error)

func (f handlerFunc) Handle(ctx context.Context, req *Request) (any, error) { return f(ctx, req) }

// Mux is a [Handler] that dispatches on the payload's Go type, so one
// service handles many message types. Register handlers before the mux
// receives messages; it is safe for concurrent use.
type Mux struct {
	mu       sync.RWMutex
	handlers map[reflect.Type]Handler
	reqs     map[reflect.Type]busx.TypeDecl // the types Handle registered
	replies  map[reflect.Type]busx.TypeDecl // their reply types
}

// NewMux returns an empty mux.
func NewMux() *Mux {
	return &Mux{handlers: make(map[reflect.Type]Handler), reqs: make(map[reflect.Type]busx.TypeDecl), replies: make(map[reflect.Type]busx.TypeDecl)}
}

// muxSelf returns m; a type embedding *Mux has it too, so the SDK finds
// the mux's request types (service routes a message by its type).
func (m *Mux) muxSelf() *Mux { return m }

// types returns the types m handles and replies with.
func (m *Mux) types() (reqs, replies []busx.TypeDecl) {
	if m == nil {
		return nil, nil
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Collect(maps.Values(m.reqs)), slices.Collect(maps.Values(m.replies))
}

// declare returns T's declaration; ok is false for a pointer or an
// interface type such as any.
func declare[T any]() (d busx.TypeDecl, ok bool) {
	t := reflect.TypeFor[T]()
	if t.Kind() == reflect.Pointer || t.Kind() == reflect.Interface {
		return d, false
	}
	return busx.TypeDecl{Type: t, Register: message.Register[T]}, true
}

// handleType routes payloads of prototype's type (a value or pointer of a
// registered type) to h, replacing any earlier handler of that type.
func (m *Mux) handleType(prototype any, h Handler) {
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
		return nil, message.ErrUnknownMessage.WithDetails(fmt.Sprintf("service %s has no handler for %s", req.env.ServiceID, req.env.Type))
	}
	return h.Handle(ctx, req)
}

// Handle registers on m the handler of requests of type Req (a
// registered type), replying with Resp (a registered type, or a pointer to
// one; message.Empty for no result), replacing any earlier handler of Req.
// r is the request itself: the resource it is about ([Request.Resource]),
// its id, headers, sender and deadline, and the node it runs on.
func Handle[Req, Resp any](m *Mux, fn func(ctx context.Context, r *Request, req Req) (Resp, error)) {
	m.handleType((*Req)(nil), typedRequestHandler(fn))
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := declare[Req](); ok {
		m.reqs[d.Type] = d
	}
	if d, ok := declare[Resp](); ok {
		m.replies[d.Type] = d
	}
}

func typedRequestHandler[Req, Resp any](fn func(ctx context.Context, r *Request, req Req) (Resp, error)) Handler {
	return handlerFunc(func(ctx context.Context, r *Request) (any, error) {
		p, ok := r.Payload.(*Req)
		if !ok || p == nil {
			return nil, message.ErrUnknownMessage.WithDetails(fmt.Sprintf("got %s (%T), want %T", r.env.Type, r.Payload, p))
		}
		resp, err := fn(ctx, r, *p)
		if err != nil {
			return nil, err
		}
		return resp, nil
	})
}

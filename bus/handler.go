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

// Request is a message delivered to a [Handler]. A handler treats it as
// read-only and does not keep it after it returns.
type Request struct {
	env *wire.Envelope // routing fields and headers
	// Payload is the decoded body: a pointer to a value of the registered
	// type the message names.
	Payload any
	bus     *CloudBus // the bus that received it

	deadline time.Time // the sender's deadline on this node's clock; zero if none
}

// Resource returns the canonical UUID of the resource the message is
// about, or "". For a message.Routed payload it is the UUID the payload
// names.
func (r *Request) Resource() string { return r.env.ResourceUUID }

// Header returns the value of a header the sender set, or "".
func (r *Request) Header(key string) string { return r.env.Headers[key] }

// Source returns the sender: a node's UUID, or the client id of a process
// that is not a node. A message a node forwarded names that node.
func (r *Request) Source() string { return r.env.Source }

// Node returns the UUID of the node the handler runs on.
func (r *Request) Node() string {
	if r.bus == nil {
		return ""
	}
	return r.bus.Node()
}

// ID returns the message's id, a canonical UUID. It stays the same when
// the message is redelivered, re-routed, forwarded or sent again with
// [WithID]: a handler of a non-idempotent operation deduplicates by it.
func (r *Request) ID() string { return r.env.ID }

// Type returns the registered name of the payload's type.
func (r *Request) Type() string { return r.env.Type }

// Deadline returns the sender's deadline on this node's clock, and false
// if it set none. The handler's ctx carries it too.
func (r *Request) Deadline() (time.Time, bool) { return r.deadline, !r.deadline.IsZero() }

// Handler handles the messages of one service.
//
// Handle may be called concurrently, but one message at a time per
// resource, in arrival order. ctx carries the sender's deadline and ends
// when the bus closes. The returned value, of a registered type or nil, is
// a Call's reply (a Send ignores it); a returned error reaches the caller
// with its code. A panic is answered with message.ErrInternal.
type Handler interface {
	// Handle handles one message.
	Handle(ctx context.Context, req *Request) (any, error)
}

// ErrRelease, returned by a handler that did nothing and cannot serve the
// message now while another node could, gives the message back to its
// queue unanswered, without counting it as a failed delivery. The caller's
// deadline still bounds it.
var ErrRelease = errors.New("bus: give the message back to its queue")

type handlerFunc func(ctx context.Context, req *Request) (any, error)

func (f handlerFunc) Handle(ctx context.Context, req *Request) (any, error) { return f(ctx, req) }

// Mux is a [Handler] that dispatches on the payload's Go type. Register
// handlers ([Handle]) before it receives messages; it is safe for
// concurrent use.
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

// muxSelf returns m, also for a type embedding *Mux.
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

// handleType routes payloads of prototype's type (value or pointer) to h,
// replacing any earlier handler.
func (m *Mux) handleType(prototype any, h Handler) {
	t := reflect.TypeOf(prototype)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	m.mu.Lock()
	m.handlers[t] = h
	m.mu.Unlock()
}

// Handle runs the handler of req's payload type, or answers
// message.ErrUnknownMessage.
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

// Handle registers on m the handler of requests of type Req, replacing any
// earlier one. Req and Resp are registered types (Resp may be a pointer to
// one; message.Empty for no result). r is the request itself: its
// resource, id, headers, sender and deadline.
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

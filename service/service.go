package service

import (
	"context"
	"reflect"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/ring"
)

// Service is one service every node hosts, on its own queue
// <prefix>.message.<Name>.<node> ([bus.Handler] states the concurrency).
// It may also implement [Starter], [Stopper], [RingListener],
// [EvictionListener] and [APIService].
type Service interface {
	// Name is the service's name: letters, digits, '_' and '-'.
	Name() string
	bus.Handler
}

// Starter is a service whose Start runs once per node start, with the bus
// open and before the node joins; an error aborts the start.
type Starter interface {
	// Start prepares the service on n.
	Start(ctx context.Context, n *Node) error
}

// Stopper is a service whose Stop runs once, after its queue was drained,
// whether the node left or was evicted.
type Stopper interface {
	// Stop releases what Start acquired.
	Stop(ctx context.Context) error
}

// RingListener is a service that reacts to ring changes, such as by taking
// over what it now owns. RingChanged runs off the message path, one call
// at a time across the node's services, changes during a call coalescing
// into the next; ctx ends when the node stops; ch is the listener's.
type RingListener interface {
	// RingChanged reports nodes that joined or left this node's ring.
	RingChanged(ctx context.Context, ch RingChange)
}

// EvictionListener is a service told, like a [RingListener], that its node
// was evicted and stopped handling messages.
type EvictionListener interface {
	// Evicted reports this node's eviction.
	Evicted(ctx context.Context)
}

// APIService is a service that accepts the types of APIMessages' values
// through api.portal.
type APIService interface {
	// APIMessages returns a value of each accepted type.
	APIMessages() []any
}

// RingChange describes a change of this node's ring.
type RingChange struct {
	// Joined lists the nodes added, sorted.
	Joined []string
	// Left lists the nodes removed, sorted.
	Left []string
	// Members lists the nodes after the change, sorted.
	Members []string
	// Fingerprint is the ring's after the change.
	Fingerprint ring.Fingerprint
}

// Named returns a Service named name that hands its messages to h. If h
// is a *bus.Mux, [Call] and [Send] route its types to this service.
func Named(name string, h bus.Handler) Service {
	return &simple{name: name, h: h}
}

// API is [Named] for a service that also accepts h's types through
// api.portal, so that a [Client] can call it.
//
//	mux := bus.NewMux()
//	bus.Handle(mux, func(ctx context.Context, r *bus.Request, m Increment) (Count, error) { ... })
//	svc := service.API("counter", mux)
func API(name string, h bus.Handler) Service {
	return &simpleAPI{simple: &simple{name: name, h: h}}
}

type simple struct {
	name string
	h    bus.Handler
}

func (s *simple) Name() string { return s.name }

func (s *simple) Handle(ctx context.Context, r *bus.Request) (any, error) { return s.h.Handle(ctx, r) }

func (s *simple) handler() bus.Handler { return s.h }

type simpleAPI struct {
	*simple
}

func (s *simpleAPI) APIMessages() []any {
	var protos []any
	reqs, _ := busx.MuxTypes(s.h)
	for _, d := range reqs {
		protos = append(protos, reflect.Zero(d.Type).Interface())
	}
	return protos
}

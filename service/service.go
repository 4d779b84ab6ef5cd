package service

import (
	"context"
	"reflect"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/ring"
)

// Service is one service hosted by every management node, such as
// "vmInstance" or "host". The node declares its queue
// <prefix>.message.<Name>.<nodeUUID> and hands the queue's messages to
// Handle (see [bus.Handler] for the concurrency contract: one message at a
// time per resource, different resources in parallel).
//
// A service keeps no state about which node manages what: the ring says
// who owns a resource, the database holds the resource. A service may
// also implement [Starter], [Stopper], [RingListener],
// [EvictionListener] and [APIService].
type Service interface {
	// Name is the service name used in queue names and service ids:
	// letters, digits, '_' and '-'.
	Name() string
	bus.Handler
}

// Starter is implemented by a service that prepares itself before its
// queue is consumed. Start runs once per node start, after the node's bus
// is open (it may send messages) and before the node joins the ring. An
// error aborts the node's start.
type Starter interface {
	// Start prepares the service on node n.
	Start(ctx context.Context, n *Node) error
}

// Stopper is implemented by a service that cleans up when the node stops.
// Stop runs once, after the service's queue was drained, whether the node
// left in order or was evicted.
type Stopper interface {
	// Stop releases what Start acquired.
	Stop(ctx context.Context) error
}

// RingListener is implemented by a service that reacts to membership
// changes, typically to take over the resources it now owns (reconnect
// the hosts that hashed to a node that left).
//
// RingChanged runs on the node's hook dispatcher, off the message path,
// one call at a time across all services of the node, after the ring copy
// changed. Changes that happen while a call runs are coalesced into the
// next call, so a slow listener delays only later hook calls, never
// message delivery. ctx is canceled when the node stops. ch is the
// listener's to keep.
type RingListener interface {
	// RingChanged reports nodes that joined or left this node's ring.
	RingChanged(ctx context.Context, ch RingChange)
}

// EvictionListener is implemented by a service that must react when its
// own node is evicted (its heartbeat record vanished): the node has
// already stopped handling messages; peers own its resources now. It
// runs on the hook dispatcher like RingChanged.
type EvictionListener interface {
	// Evicted reports that this node was evicted.
	Evicted(ctx context.Context)
}

// APIService is implemented by a service that accepts API messages
// through the shared api.portal queue. APIMessages returns a value of
// each such registered payload type; the portal of every node forwards a
// message of one of those types to this service on the resource's owner
// (if the message names a resource) or on its own node.
type APIService interface {
	// APIMessages returns prototypes of the accepted API message types.
	APIMessages() []any
}

// RingChange describes a change of this node's ring copy.
type RingChange struct {
	// Joined lists nodes added to the ring, sorted.
	Joined []string
	// Left lists nodes removed from the ring, sorted.
	Left []string
	// Members is the ring's membership after the change, sorted.
	Members []string
	// Fingerprint is the ring's fingerprint after the change.
	Fingerprint ring.Fingerprint
}

// Named returns a Service named name that hands its messages to h, for
// services that need no hooks. If h is a *bus.Mux, the types it handles
// are the service's: [Call] and [Send] route a message of one of them to
// this service.
func Named(name string, h bus.Handler) Service {
	return &simple{name: name, h: h}
}

// API is [Named] for a service that also accepts every type h handles
// through api.portal, so a [Client] can call it.
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

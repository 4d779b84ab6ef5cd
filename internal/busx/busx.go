// Package busx is the plumbing of a bus.CloudBus that only the SDK's own
// packages use: the node's router reads the options a caller gave, forwards
// and reroutes messages, drains and serves the shared api.portal queue.
// Package bus installs its hooks ([Set]) when it is initialized.
package busx

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// CallOptions are the per-call options a bus.Option sets.
type CallOptions struct {
	Timeout  time.Duration     // WithTimeout's
	Headers  map[string]string // WithHeader's
	Resource string            // WithResource's
	ID       string            // WithID's, if IDSet
	IDSet    bool              // WithID was given
	Retry    int               // WithRetry's max, if RetrySet
	RetrySet bool              // WithRetry was given
	Delivery uint8             // WithDelivery's mode + 1; 0: the bus's
}

// MessageID returns the canonical WithID, or "" if none was given; a
// malformed id fails with message.ErrInvalidUUID.
func (o CallOptions) MessageID() (string, error) {
	if !o.IDSet {
		return "", nil
	}
	return message.NormalizeUUID(o.ID)
}

// Retries returns the WithRetry max, or 0 if none was given; a max below 1
// fails with message.ErrBadRequest.
func (o CallOptions) Retries() (int, error) {
	if !o.RetrySet {
		return 0, nil
	}
	if o.Retry < 1 {
		return 0, message.ErrBadRequest.WithDetails(fmt.Sprintf("WithRetry(%d): the retry count must be at least 1", o.Retry))
	}
	return o.Retry, nil
}

// ErrDrop, returned by a Reroute route function, drops the message: it is
// acknowledged and counted, not moved.
var ErrDrop = errors.New("bus: drop the message")

// RerouteStats counts what Reroute did with a queue's messages.
type RerouteStats struct {
	Moved   int // published where route said
	Late    int // past their deadline: requests dropped, one-way messages dead-lettered
	Dropped int // undecodable, or route returned ErrDrop
}

// Engine is what the SDK's own packages use of a bus.CloudBus beyond its
// public methods.
type Engine interface {
	// Forward publishes the message req carries to target, unchanged but
	// for its service id and the given headers (added or replacing), within
	// the message's deadline. The forwarding handler then neither replies
	// nor fails.
	Forward(ctx context.Context, req any, target string, headers map[string]string) error
	// Reroute empties queue, which nobody consumes any more: route sets
	// each message's ServiceID, the message is published there and
	// acknowledged. It deletes the queue once idle unless keep is set.
	Reroute(ctx context.Context, queue string, route func(env *wire.Envelope) error, keep bool) (RerouteStats, error)
	// ReplayDead is bus.CloudBus.ReplayDeadLetters with route setting
	// each message's ServiceID (and headers) before it is sent again.
	ReplayDead(ctx context.Context, ids []string, route func(env *wire.Envelope) error) (replayed, missing []string, err error)
	// DeleteQueueIfIdle deletes queue if it holds no ready message and
	// has no consumer (driver.Transport.DeleteQueueIfIdle), without
	// consuming it first.
	DeleteQueueIfIdle(ctx context.Context, queue string) error
	// Drain stops the bus's own per-node service queues cleanly, handing
	// back what the handlers did not take.
	Drain(ctx context.Context) error
	// CloseWithin is bus.CloudBus.Close with its queue deletions ending
	// with ctx (not after the bus's ReplyTimeout).
	CloseWithin(ctx context.Context) error
	// AbandonCalls fails every call pending towards node (with a
	// non-zero before, sent before it) with message.ErrNodeLeft and
	// returns how many it failed.
	AbandonCalls(node string, before time.Time, cause error) int
	// RegisterShared serves the shared queue of serviceID with h, a
	// bus.Handler.
	RegisterShared(ctx context.Context, serviceID string, h any) error
	// RegisterRaw is RegisterShared for a handler that reads only the
	// envelope and forwards the body as it arrived (CallRaw): the bus
	// does not decode serviceID's payloads, so a request's Payload is
	// nil. A type not registered on this bus is still refused with
	// message.ErrUnknownMessage before h runs, as decoding would refuse
	// it. Whether a message.Routed payload names the envelope's resource
	// is checked by the bus that decodes it, where h forwards it, before
	// anything runs there.
	RegisterRaw(ctx context.Context, serviceID string, h any) error
	// CallRaw is bus.Call with a body encoded already: it sends a request
	// of type typ with body (its JSON, sent as is) to target, with o's
	// id, headers and retry header; only o.Resource names its resource,
	// and o.Headers becomes the envelope's. It waits as Call does (until
	// ctx's deadline or o.Timeout, the earlier, or the default timeout if
	// neither is set) and returns the reply's type and body as they
	// arrived, undecoded, or the reply's error as its handler sent it (a
	// *message.Error, wrapped), or why no reply came.
	CallRaw(ctx context.Context, target, typ string, body []byte, o CallOptions) (Raw, error)
	// Unregister stops consuming serviceID's queue, deleting it if asked.
	Unregister(ctx context.Context, serviceID string, deleteQueue bool) error
	// Services lists the service ids registered on the bus.
	Services() []string
	// QueueName returns the queue of a service id.
	QueueName(serviceID string) string
	// APIEntry returns the entry api.portal sits behind.
	APIEntry() string
	// Registry returns the bus's payload registry.
	Registry() *message.Registry
}

// Raw is a payload still encoded. A handler may return a Raw as its
// reply, which the bus sends as is, without encoding it; the zero Raw is
// a reply without body.
type Raw struct {
	// Type is the registered name of the body's type; "" for no body.
	Type string
	// Body is the JSON of a value of Type; read-only once handed over,
	// on either side.
	Body []byte
}

// Hooks are set once by package bus when it is initialized.
type Hooks struct {
	Engine     func(b any) Engine                     // the Engine of a *bus.CloudBus (or a type embedding one)
	Envelope   func(req any) *wire.Envelope           // the envelope of a *bus.Request
	NewRequest func(env *wire.Envelope) any           // a *bus.Request carrying env, for tests
	Receiver   func(req any) Engine                   // the Engine of the bus that received a *bus.Request
	Options    func(opts any) CallOptions             // the options a []bus.Option sets
	MuxTypes   func(h any) (reqs, replies []TypeDecl) // the types a *bus.Mux (or a type embedding one) handles and replies with
}

var hooks Hooks

// Set installs package bus's hooks.
func Set(h Hooks) { hooks = h }

// Of returns the Engine of b, a *bus.CloudBus or a type embedding one.
func Of(b any) Engine { return hooks.Engine(b) }

// EnvelopeOf returns the envelope of req, a *bus.Request: read-only.
func EnvelopeOf(req any) *wire.Envelope { return hooks.Envelope(req) }

// NewRequest returns a *bus.Request carrying env and no payload, for tests.
func NewRequest(env *wire.Envelope) any { return hooks.NewRequest(env) }

// Receiver returns the Engine of the bus that received req, a *bus.Request.
func Receiver(req any) Engine { return hooks.Receiver(req) }

// TypeDecl is a Go type a mux handles or replies with.
type TypeDecl struct {
	Type     reflect.Type                                   // a value type
	Register func(reg *message.Registry, name string) error // message.Register of Type
}

// MuxTypes returns the types handled on h and replied with, if h is a
// *bus.Mux or embeds one; nil otherwise.
func MuxTypes(h any) (reqs, replies []TypeDecl) { return hooks.MuxTypes(h) }

// Apply returns the options opts, a []bus.Option, set.
func Apply(opts any) CallOptions { return hooks.Options(opts) }

// ResourceOf returns the canonical UUID of the resource msg is about: the
// one its type names (message.Routed) or, for other types, the one
// WithResource gave; "" for a message about no resource. It fails with
// message.ErrBadRequest when both name a resource and they differ, or when
// a Routed message names none, and with message.ErrInvalidUUID when a UUID
// is malformed.
func ResourceOf(msg any, o CallOptions) (string, error) {
	named, routed, err := message.ResourceOf(msg)
	if err != nil {
		return "", err
	}
	if o.Resource == "" {
		return named, nil
	}
	id, err := message.NormalizeUUID(o.Resource)
	if err != nil {
		return "", err
	}
	if routed && id != named {
		return "", message.ErrBadRequest.WithDetails(fmt.Sprintf(
			"WithResource(%s) differs from the resource %s that the %T names; drop WithResource, the message names its resource", id, named, msg))
	}
	return id, nil
}

// leftOnlyKey marks a context whose messages carry only their time left.
type leftOnlyKey struct{}

// TimeLeftOnly returns ctx marked so that the messages sent with it carry
// only their time left, no absolute deadline in cluster time: for the
// query that measures the cluster time, whose absolute deadline, written
// with a wrong estimate, could have passed already.
func TimeLeftOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, leftOnlyKey{}, true)
}

// IsTimeLeftOnly reports whether ctx was marked by TimeLeftOnly.
func IsTimeLeftOnly(ctx context.Context) bool {
	v, _ := ctx.Value(leftOnlyKey{}).(bool)
	return v
}

package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
)

// HeaderOwner is the header a node sets on a message it routed by its
// ring: the owner it computed. The receiver checks that its own ring
// agrees before running the handler, so that while ring copies converge
// a message is never run by a node that does not believe it owns the
// resource; it answers message.ErrNotOwner instead, which is safe to
// retry.
const HeaderOwner = "cloudbus-owner"

// Route returns the service id of service on the node that owns
// resourceUUID on this node's ring: "<service>.<owner>".
func (n *Node) Route(service, resourceUUID string) (string, error) {
	owner, err := n.Owner(resourceUUID)
	if err != nil {
		return "", fmt.Errorf("service: route %s: %w", service, err)
	}
	return bus.ServiceID(service, owner), nil
}

// Call sends msg to service by the article's rule and waits for the reply
// (see bus.CloudBus.Call):
//
//   - a message about a resource goes to service on the node that owns the
//     resource on this node's ring, so messages about one resource are
//     serialized on its owner. The resource is the one msg's type names
//     (message.Routed) or, for a type that names none, the one
//     bus.WithResource gives. If the receiver is not the owner on its own
//     ring, or the owner's queue is gone (both mean ring copies are
//     converging, and neither ran the message), the call is routed again
//     after a short pause, up to Config.RouteRetries times within ctx.
//   - a creation message or a message about no resource goes to service on
//     this node, which is always reachable.
//
// A Routed message naming no resource, or a WithResource contradicting
// the one it names, fails with message.ErrBadRequest before anything is
// sent. See the package documentation for which call to use when.
func (n *Node) Call(ctx context.Context, service string, msg any, opts ...bus.Option) (any, error) {
	b, err := n.busForCall()
	if err != nil {
		return nil, err
	}
	var out any
	err = n.dispatch(ctx, service, msg, opts, func(target string, o []bus.Option) error {
		var err error
		out, err = b.Call(ctx, target, msg, o...)
		return err
	})
	return out, err
}

// Call is the typed form of [Node.Call]: it decodes the reply as Resp (a
// registered type T or *T; see bus.Call).
func Call[Resp any](ctx context.Context, n *Node, service string, msg any, opts ...bus.Option) (Resp, error) {
	var out Resp
	b, err := n.busForCall()
	if err != nil {
		return out, err
	}
	err = n.dispatch(ctx, service, msg, opts, func(target string, o []bus.Option) error {
		var err error
		out, err = bus.Call[Resp](ctx, b, target, msg, o...)
		return err
	})
	return out, err
}

// Send sends msg one-way to service by the same rule as [Node.Call]:
// to the owner of the resource it is about (re-routed while the owner's
// queue is missing), or to this node.
func (n *Node) Send(ctx context.Context, service string, msg any, opts ...bus.Option) error {
	b, err := n.busForCall()
	if err != nil {
		return err
	}
	return n.dispatch(ctx, service, msg, opts, func(target string, o []bus.Option) error {
		return b.Send(ctx, target, msg, o...)
	})
}

func (n *Node) busForCall() (*bus.CloudBus, error) {
	b := n.Bus()
	if b == nil {
		return nil, fmt.Errorf("service: node %s is not running: %w", n.id, message.ErrClosed)
	}
	return b, nil
}

// dispatch finds the resource msg is about and sends it to its owner, or
// to this node if it is about none.
func (n *Node) dispatch(ctx context.Context, service string, msg any, opts []bus.Option, send func(target string, o []bus.Option) error) error {
	res, err := bus.ResourceOf(msg, opts...)
	if err != nil {
		return fmt.Errorf("service: call %s: %w", service, err)
	}
	if res == "" {
		return send(bus.ServiceID(service, n.id), opts)
	}
	return n.routed(ctx, service, res, func(target string, o []bus.Option) error {
		// The router's options come last, so a caller's headers cannot
		// override the owner it computed.
		return send(target, append(slices.Clone(opts), o...))
	})
}

// routed runs send against the owner of resourceUUID, re-routing on the
// retry-safe routing errors.
// res is canonical.
func (n *Node) routed(ctx context.Context, service, res string, send func(target string, o []bus.Option) error) error {
	pause := 10 * time.Millisecond
	for attempt := 0; ; attempt++ {
		owner, err := n.ring.Locate(res)
		if err != nil {
			return fmt.Errorf("service: route %s for %s: %w: %w", service, res, message.ErrNoRoute, err)
		}
		err = send(bus.ServiceID(service, owner), []bus.Option{bus.WithResource(res), bus.WithHeader(HeaderOwner, owner)})
		if err == nil || attempt >= n.cfg.RouteRetries || !(errors.Is(err, message.ErrNotOwner) || errors.Is(err, message.ErrNoRoute)) {
			return err
		}
		n.log.Debug("re-routing", "service", service, "resource", res, "owner", owner, "attempt", attempt+1, "err", err)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return err
		}
		pause *= 2
	}
}

// guard wraps a service's handler: it refuses every message once the node
// was evicted, while it is fenced, and a message routed by ring to an
// owner that this node's ring does not agree is itself.
//
// A request refused so is answered message.ErrNotOwner, which its caller
// may retry (service.Node.Call and the portal do). A one-way message has
// nobody to retry it, so it is never dropped for these reasons: if this
// node's ring names another owner, the message is forwarded there as is
// (at most maxForwardHops times, while rings converge); otherwise it is
// given back to its queue after a short pause (bus.ErrRelease), for this
// node once it can serve it, or for the survivors that drain its queues
// once it has been evicted.
func (n *Node) guard(s Service) bus.Handler {
	return bus.HandlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		oneWay := r.Envelope.Kind == message.KindSend
		notNow := func(err error) (any, error) {
			if !oneWay {
				return nil, err
			}
			select {
			case <-time.After(portalReleasePause):
			case <-ctx.Done():
			}
			return nil, bus.ErrRelease
		}
		switch st := n.State(); st {
		case StateServing, StateLeaving:
		case StateEvicted:
			return notNow(message.ErrNotOwner.WithDetails(fmt.Sprintf("node %s was evicted and no longer serves", n.id)))
		default:
			return notNow(message.ErrNotOwner.WithDetails(fmt.Sprintf("node %s is %s", n.id, st)))
		}
		if r.Envelope.ResourceUUID != "" && n.Fenced() {
			return notNow(message.ErrNotOwner.WithDetails(fmt.Sprintf(
				"node %s is fenced: it has not written its heartbeat for longer than its lease and may be evicted; retry on the next owner", n.id)))
		}
		if claimed := r.Envelope.Headers[HeaderOwner]; claimed != "" && r.Envelope.ResourceUUID != "" {
			owner, err := n.ring.Locate(r.Envelope.ResourceUUID)
			if err != nil || owner != n.id {
				if oneWay && err == nil && forwardHops(r) < maxForwardHops {
					if ferr := n.forward(ctx, r, owner); ferr == nil {
						return nil, nil
					}
				}
				return notNow(message.ErrNotOwner.WithDetails(fmt.Sprintf(
					"resource %s: the sender's ring names %s, this node's ring (%s) names %q",
					r.Envelope.ResourceUUID, claimed, n.ring.Fingerprint(), owner)))
			}
		}
		return s.Handle(ctx, r)
	})
}

// HeaderHops counts how many times a one-way message was forwarded
// between nodes whose rings disagreed about its owner.
const HeaderHops = "cloudbus-hops"

// maxForwardHops bounds the forwards of one message.
const maxForwardHops = 3

func forwardHops(r *bus.Request) int {
	n, _ := strconv.Atoi(r.Header(HeaderHops))
	return n
}

// forward sends r's message on to its service on owner, unchanged but
// for the owner header and the hop count.
func (n *Node) forward(ctx context.Context, r *bus.Request, owner string) error {
	svc, _, ok := bus.SplitServiceID(r.Envelope.ServiceID)
	if !ok {
		return fmt.Errorf("service: forward %s: not a service id", r.Envelope.ServiceID)
	}
	err := r.Bus.Forward(ctx, r, bus.ServiceID(svc, owner), map[string]string{
		HeaderOwner: owner, HeaderHops: strconv.Itoa(forwardHops(r) + 1),
	})
	if err != nil {
		n.log.Debug("forward a one-way message to its owner", "to", owner, "id", r.ID(), "err", err)
	}
	return err
}

// portal serves the shared api.portal queue: it forwards each API message
// to the service that accepts its type, on the resource's owner or, for a
// message about no resource, on this node, and returns the reply to the
// original caller.
//
// A portal whose node is fenced (it could not beat for longer than the
// lease) or not serving cannot vouch for its ring: it gives the message
// back to api.portal, after a short pause, for a healthy node's portal.
func (n *Node) portal(ctx context.Context, r *bus.Request) (any, error) {
	if st := n.State(); st != StateServing || n.Fenced() {
		select {
		case <-time.After(portalReleasePause):
		case <-ctx.Done():
		}
		return nil, bus.ErrRelease
	}
	if r.Type() == TypeClusterTimeQuery {
		return n.clusterTimeReply()
	}
	service, ok := n.api[r.Envelope.Type]
	if !ok {
		return nil, message.ErrUnknownMessage.WithDetails(fmt.Sprintf("no service accepts %s through %s", r.Envelope.Type, bus.APIPortal))
	}
	opts := []bus.Option{bus.WithHeaders(r.Envelope.Headers), bus.WithHeader(HeaderPortal, n.id)}
	if res := r.Resource(); res != "" {
		// The bus checked that a Routed payload names this resource.
		opts = append(opts, bus.WithResource(res))
	}
	return n.Call(ctx, service, r.Payload, opts...)
}

// portalReleasePause is how long a fenced portal waits before giving a
// message back, so that a cluster whose every node is fenced (a database
// outage) does not spin its messages through the broker.
const portalReleasePause = 100 * time.Millisecond

// HeaderPortal is set on a message forwarded from api.portal: the node
// whose portal forwarded it.
const HeaderPortal = "cloudbus-portal"

package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

func (n *Node) busForCall() (*bus.CloudBus, error) {
	b := n.Bus()
	if b == nil {
		return nil, fmt.Errorf("service: node %s is not running: %w", n.id, message.ErrClosed)
	}
	return b, nil
}

// dispatch finds the resource msg (of type typ) is about and sends it to
// its owner, or to this node if it is about none. A nil msg (a body
// forwarded encoded) is about the resource opts name (bus.WithResource),
// if any.
func (n *Node) dispatch(ctx context.Context, service, typ string, msg any, opts []bus.Option, sendVia func(b *bus.CloudBus, target string, o []bus.Option) error) error {
	b, err := n.busForCall()
	if err != nil {
		return err
	}
	send := func(target string, o []bus.Option) error { return sendVia(b, target, o) }
	o := busx.Apply(opts)
	res, err := busx.ResourceOf(msg, o)
	var id string
	if err == nil {
		id, err = o.MessageID()
	}
	var retries int
	if err == nil {
		retries, err = o.Retries()
	}
	if err != nil {
		return fmt.Errorf("service: call %s: %w", service, err)
	}
	if res == "" {
		return send(bus.ServiceID(service, n.id), opts)
	}
	// Every attempt of this call carries one message id: the caller's,
	// or one chosen now.
	var fixed []bus.Option
	if id == "" {
		fixed = []bus.Option{bus.WithID(message.NewUUID())}
	}
	return n.routed(ctx, service, typ, res, retries, func(target string, o []bus.Option) error {
		// The router's options come last, so a caller's headers cannot
		// override the owner it computed.
		return send(target, slices.Concat(opts, fixed, o))
	})
}

// routed runs send against the owner of resourceUUID, re-routing on the
// retry-safe routing errors, and with retries > 0 (bus.WithRetry) on
// node-left and not-owner once the ring changed. res is canonical.
//
// Re-routes (Config.RouteRetries of them) follow not_owner and no_route
// after a pause that doubles from 10 ms, the last after not_owner at
// least a beat interval (the receiver's ring may be the one behind):
// neither ran the message. Once
// they are spent, and after every node_left, a retry (retries of them)
// waits until this node's ring changed: for node_left until it no longer
// names the owner that failed, for not_owner until its fingerprint
// differs from the one the failed attempt was routed by or a beat
// interval passed (the receiver's ring may be the one behind, and this
// one may never change again); it then routes afresh, with its own
// re-routes. A wait that ctx or the node's stop
// ends returns the last attempt's error. After a node_left, an error
// that says nothing ran is returned as node_left (see settle). Each
// re-route and retry, once its wait is over, is reported to
// Config.Observer as a bus.OpReroute of a message of type typ.
func (n *Node) routed(ctx context.Context, service, typ, res string, retries int, send func(target string, o []bus.Option) error) (err error) {
	var orphan error // an earlier attempt's node_left: that attempt may still run
	defer func() { err = settle(orphan, err) }()
	pause := 10 * time.Millisecond
	reroutes := n.cfg.RouteRetries
	for attempt := 1; ; attempt++ {
		fp := n.ring.Fingerprint()
		owner, err := n.ring.Locate(res)
		if err != nil {
			return fmt.Errorf("service: route %s for %s: %w: %w", service, res, message.ErrNoRoute, err)
		}
		err = send(bus.ServiceID(service, owner), []bus.Option{bus.WithResource(res), bus.WithHeader(wire.HeaderOwner, owner)})
		notOwner, noRoute, left := errors.Is(err, message.ErrNotOwner), errors.Is(err, message.ErrNoRoute), errors.Is(err, message.ErrNodeLeft)
		switch {
		case err == nil:
			return nil
		case (notOwner || noRoute) && reroutes > 0:
			reroutes--
			n.log.Debug("re-routing", "service", service, "resource", res, "owner", owner, "attempt", attempt, "err", err)
			if reroutes == 0 && notOwner {
				// The last re-route waits a beat interval: the receiver's
				// ring may be the one behind (this node saw the change
				// first), and catches up within a beat of the store.
				pause = max(pause, n.cfg.Heartbeat.WithDefaults().Interval)
			}
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return err
			}
			pause *= 2
			n.observe(bus.Observation{Op: bus.OpReroute, Type: typ, ServiceID: bus.ServiceID(service, owner), Resource: res, Err: err})
		case (notOwner || left) && retries > 0:
			retries--
			if left {
				orphan = err
			}
			n.log.Debug("retrying an idempotent call once the ring changed", "service", service, "resource", res, "owner", owner, "attempt", attempt, "err", err)
			// Or a beat interval passed: the receiver's ring may be the
			// one behind (this node saw the change first), and then this
			// ring does not change again.
			until := time.Now().Add(n.cfg.Heartbeat.WithDefaults().Interval)
			changed := func() bool { return n.ring.Fingerprint() != fp || !time.Now().Before(until) }
			poll := time.Until(until)
			if left {
				poll = 0
				changed = func() bool {
					now, err := n.ring.Locate(res)
					return err != nil || now != owner
				}
			}
			if werr := n.awaitRing(ctx, changed, poll); werr != nil {
				return err
			}
			// Routing starts afresh on the changed ring: a node that
			// just joined may still refuse for a moment.
			reroutes, pause = n.cfg.RouteRetries, 10*time.Millisecond
			n.observe(bus.Observation{Op: bus.OpReroute, Type: typ, ServiceID: bus.ServiceID(service, owner), Resource: res, Err: err})
		default:
			return err
		}
	}
}

// observe reports o to Config.Observer, if any.
func (n *Node) observe(o bus.Observation) {
	if n.cfg.Observer != nil {
		n.cfg.Observer.Observe(o)
	}
}

// settle is the error of a routed call whose last attempt failed with
// err, where orphan is an earlier attempt's node_left (nil if none).
// That attempt's message may still run on the new owner within its
// deadline, moved there from the queue of the owner that left, so an
// error of a later attempt that says nothing ran (message.RetrySafe or
// message.RetryNever: not_owner, busy, a refusal such as bad_request)
// does not tell the call's outcome: the call ends with node_left
// (outcome unknown), naming that error. Other errors are returned as
// they are.
func settle(orphan, err error) error {
	if orphan == nil || err == nil {
		return err
	}
	switch message.AsError(err).Retry() {
	case message.RetrySafe, message.RetryNever:
		return message.ErrNodeLeft.WithDetails(fmt.Sprintf(
			"an earlier attempt's owner left mid-call and that attempt may still run where its message was moved; the last attempt failed: %v", err))
	}
	return err
}

// awaitRing waits until cond holds, checking it at every change of this
// node's ring or state, and every poll if poll > 0; it returns ctx's
// error if ctx ends first, or an error matching [ErrNotRunning] if the
// node stops.
func (n *Node) awaitRing(ctx context.Context, cond func() bool, poll time.Duration) error {
	for {
		changed := n.watch()
		if cond() {
			return nil
		}
		if err := n.waitChange(ctx, changed, poll); err != nil {
			return err
		}
	}
}

// guard wraps a service's handler: it refuses every message once the node
// was evicted, while its lease has expired, and any message about a resource that
// this node does not own by its own ring, whoever routed it and whether or
// not it carries an owner header (wire.HeaderOwner). Messages about no
// resource (creations) run where they arrive.
//
// A request refused so is answered message.ErrNotOwner, which its caller
// may retry (service.Call and the portal do). A one-way message has
// nobody to retry it, so it is never dropped for these reasons: if this
// node's ring names another owner, the message is forwarded there as is
// (at most maxForwardHops times, while rings converge); otherwise it is
// given back to its queue after a short pause (bus.ErrRelease), for this
// node once it can serve it, or for the survivors that drain its queues
// once it has been evicted.
//
// A message about a resource runs with this node's claim on it in its
// ctx (fence.WithClaim). If the handler fails with a *fence.StaleError
// of that claim, the guard adds, as its Claimant, what the node knows of
// why the claim stopped holding (explainStale).
func (n *Node) guard(s Service) bus.Handler {
	return handlerFunc(func(ctx context.Context, r *bus.Request) (any, error) {
		oneWay := busx.EnvelopeOf(r).Kind == wire.KindSend
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
		if busx.EnvelopeOf(r).ResourceUUID != "" && n.LeaseExpired() {
			return notNow(message.ErrNotOwner.WithDetails(fmt.Sprintf(
				"node %s is off its lease: it has not written its heartbeat for longer than its lease and may be evicted; retry on the next owner", n.id)))
		}
		// Every message about a resource, owner header or not: a sender
		// that addressed this node's queue directly (a raw client, a
		// stale route) does not make it the owner.
		if busx.EnvelopeOf(r).ResourceUUID != "" {
			claimed := busx.EnvelopeOf(r).Headers[wire.HeaderOwner]
			if claimed == "" {
				claimed = "no owner (sent to this node's queue directly)"
			}
			owner, err := n.ring.Locate(busx.EnvelopeOf(r).ResourceUUID)
			if err != nil || owner != n.id {
				if oneWay && err == nil && forwardHops(r) < maxForwardHops {
					if ferr := n.forward(ctx, r, owner); ferr == nil {
						return nil, nil
					}
				}
				return notNow(message.ErrNotOwner.WithDetails(fmt.Sprintf(
					"resource %s: the sender's ring names %s, this node's ring (%s) names %q",
					busx.EnvelopeOf(r).ResourceUUID, claimed, n.ring.Fingerprint(), owner)))
			}
		}
		if g := n.gate.Load(); g != nil {
			if err := (*g)(ctx); err != nil {
				return nil, err
			}
		}
		if res := busx.EnvelopeOf(r).ResourceUUID; res != "" {
			// The handler's writes check this claim in the database
			// (package fence): the guard's checks hold when the handler
			// starts, the fence when it commits.
			ctx = fence.WithClaim(ctx, fence.Claim{Resource: res, Node: n.id, Epoch: n.Epoch()})
			reply, err := s.Handle(ctx, r)
			if err != nil {
				err = n.explainStale(err)
			}
			return reply, err
		}
		return s.Handle(ctx, r)
	})
}

// explainStale returns err with what this node knows of why its claim
// stopped holding, which the fence, reading only the heartbeat store,
// cannot tell (a record gone: left in order or evicted?), if err holds a
// *fence.StaleError of this node's claim without a Claimant: a copy of
// it with Claimant set, in place of err or wrapping it. err itself is
// not changed: the handler may share it.
func (n *Node) explainStale(err error) error {
	var se *fence.StaleError
	if !errors.As(err, &se) || se.Claim.Node != n.id || se.Claimant != "" {
		return err
	}
	c := *se
	c.Claimant = n.claimView(se.Claim.Epoch)
	if err == error(se) {
		return &c
	}
	return &claimantNote{text: err.Error() + "; the claimant node says: " + c.Claimant, stale: &c}
}

// claimantNote is a handler's error that wraps a *fence.StaleError,
// with the claimant's view added: its text is the handler's, its chain
// the explained copy of the StaleError.
type claimantNote struct {
	text  string
	stale *fence.StaleError
}

func (e *claimantNote) Error() string { return e.text }
func (e *claimantNote) Unwrap() error { return e.stale }

// claimView says what this node knows of its claim of epoch: whether it
// is leaving or left in order, was evicted, has rejoined with another
// epoch, or its lease expired. It reads only the node's own state.
func (n *Node) claimView(epoch int64) string {
	var says []string
	if now := n.Epoch(); now != epoch && now != 0 {
		says = append(says, fmt.Sprintf("it was evicted and has rejoined with epoch %d; the claim was of its life with epoch %d", now, epoch))
	}
	switch st := n.State(); st {
	case StateLeaving:
		says = append(says, "it is leaving in order: it deletes its heartbeat record once its queues are drained, or when its leave times out")
	case StateEvicted:
		says = append(says, "it was evicted by its peers")
	case StateStarting:
		says = append(says, "it was evicted by its peers and is joining again")
	case StateStopped:
		select {
		case <-n.done:
			switch err := n.Err(); {
			case err == nil:
				says = append(says, "it left in order and has stopped")
			case errors.Is(err, ErrEvicted):
				says = append(says, "it was evicted by its peers and has stopped")
			default:
				says = append(says, fmt.Sprintf("it has stopped: %v", err))
			}
		default:
			says = append(says, "it is stopping")
		}
	case StateServing:
		switch {
		case n.LeaseExpired():
			says = append(says, "its lease expired: it has not written its heartbeat for longer than its lease, and its peers may evict it")
		case len(says) == 0:
			says = append(says, fmt.Sprintf("it still serves in epoch %d with its lease current: its beats may have stalled only now, or the fence's MaxAge is shorter than the heartbeat's lease", epoch))
		}
	}
	return strings.Join(says, "; ")
}

// maxForwardHops bounds the forwards of one message.
const maxForwardHops = 3

func forwardHops(r *bus.Request) int {
	n, _ := strconv.Atoi(r.Header(wire.HeaderHops))
	return max(n, 0) // a forged negative count must not buy more forwards
}

// forward sends r's message on to its service on owner, unchanged but
// for the owner header and the hop count.
func (n *Node) forward(ctx context.Context, r *bus.Request, owner string) error {
	svc, _, ok := bus.SplitServiceID(busx.EnvelopeOf(r).ServiceID)
	if !ok {
		return fmt.Errorf("service: forward %s: not a service id", busx.EnvelopeOf(r).ServiceID)
	}
	err := busx.Receiver(r).Forward(ctx, r, bus.ServiceID(svc, owner), map[string]string{
		wire.HeaderOwner: owner, wire.HeaderHops: strconv.Itoa(forwardHops(r) + 1),
	})
	if err != nil {
		n.log.Debug("forward a one-way message to its owner", "to", owner, "id", r.ID(), "err", err)
	}
	return err
}

// portal serves the shared api.portal queue: it forwards each API message
// to the service that accepts its type, on the resource's owner or, for a
// message about no resource, on this node, and returns the reply to the
// original caller. It reads only the envelope: the body is forwarded as it
// arrived and the reply's body handed back as the owner sent it, neither
// decoded nor encoded here (the bus does not decode api.portal's payloads:
// busx.Engine.RegisterRaw).
//
// A portal whose node's lease expired (it could not beat for longer than the
// lease) or not serving cannot vouch for its ring: it gives the message
// back to api.portal, after a short pause, for a healthy node's portal.
func (n *Node) portal(ctx context.Context, r *bus.Request) (any, error) {
	if st := n.State(); st != StateServing || n.LeaseExpired() {
		select {
		case <-time.After(portalReleasePause):
		case <-ctx.Done():
		}
		return nil, bus.ErrRelease
	}
	if r.Type() == wire.TypeClusterTimeQuery {
		return n.clusterTimeReply()
	}
	service, ok := n.api[busx.EnvelopeOf(r).Type]
	if !ok {
		return nil, message.ErrUnknownMessage.WithDetails(fmt.Sprintf("no service accepts %s through %s", busx.EnvelopeOf(r).Type, bus.APIPortal))
	}
	// The forward keeps the message's id, so a handler sees the same id
	// however often api.portal redelivers the message, and applies the
	// retry its sender allowed (bus.WithRetry travels as a header).
	opts := append(withHeaders(busx.EnvelopeOf(r).Headers), bus.WithHeader(HeaderPortal, n.id), bus.WithID(portalID(r.ID())))
	if v := r.Header(bus.HeaderRetry); v != "" {
		retries, err := strconv.Atoi(v)
		if err != nil || retries < 1 {
			return nil, message.ErrBadRequest.WithDetails(fmt.Sprintf("header %s must be a retry count of at least 1, not %q", bus.HeaderRetry, truncate(v, 32)))
		}
		opts = append(opts, bus.WithRetry(retries))
	}
	if res := r.Resource(); res != "" {
		// The message is routed by its envelope's resource. The owner's
		// bus decodes the body and refuses it (bad_request) unrun if a
		// message.Routed payload names another resource, or names one
		// while the envelope names none (then it is sent to this node).
		opts = append(opts, bus.WithResource(res))
	}
	env := busx.EnvelopeOf(r)
	var reply busx.Raw
	err := n.dispatch(ctx, service, env.Type, nil, opts, func(b *bus.CloudBus, target string, o []bus.Option) error {
		var err error
		reply, err = busx.Of(b).CallRaw(ctx, target, env.Type, env.Body, busx.Apply(o))
		return err
	})
	var e *message.Error
	if errors.As(err, &e) {
		// The owner's error as it sent it: the client reads the same
		// code, description, details and cause whichever node answered,
		// not this node's account of the forward.
		return nil, e
	}
	return reply, err
}

// portalID returns the id under which the portal forwards a message
// whose id is id: id itself, normalized. A message from a sender that
// broke the envelope id's contract (not a UUID) gets a UUID
// derived from its id, so that its redeliveries still share one id.
func portalID(id string) string {
	if u, err := message.NormalizeUUID(id); err == nil {
		return u
	}
	u, _ := message.NormalizeUUID(uuid.NewSHA1(uuid.NameSpaceURL, []byte("cloudbus:message-id:"+id)).String())
	return u
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// portalReleasePause is how long a portal whose lease expired waits before giving a
// message back, so that a cluster whose every node's lease expired (a database
// outage) does not spin its messages through the broker.
const portalReleasePause = 100 * time.Millisecond

// HeaderPortal is set on a message forwarded from api.portal: the node
// whose portal forwarded it.
const HeaderPortal = "cloudbus-portal"

// withHeaders returns an option per header of h but the trace context,
// which the handler's ctx carries on (bus.TraceContextFrom): the forward
// is a child of the portal's span, when a bus.Tracer makes one.
func withHeaders(h map[string]string) []bus.Option {
	opts := make([]bus.Option, 0, len(h))
	for k, v := range h {
		if k == bus.HeaderTraceParent || k == bus.HeaderTraceState {
			continue
		}
		opts = append(opts, bus.WithHeader(k, v))
	}
	return opts
}

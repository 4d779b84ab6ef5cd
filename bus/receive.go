package bus

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// onDelivery takes a message off a service queue and schedules it. It
// never blocks: the scheduler queues the job or refuses it as busy.
func (b *CloudBus) onDelivery(s *service, d driver.Delivery) {
	select {
	case <-b.closing:
		// Never run it: the bus is closing. Close gave back the
		// deliveries it held just before it aborts this consumer, and one
		// run and failed now would be held and given back again at once,
		// over and over (a held retry failed 20 times in a row so, and
		// was dead-lettered). Left unsettled, the abort gives it back:
		// settling it here could block this callback (amqpbus releases
		// by a confirmed publish, which a frozen broker never confirms).
		return
	default:
	}
	arrived := time.Now()
	size := len(d.Body())
	// A large body's memory is free once it is settled: the release is
	// armed when this returns, and again when its handling ends.
	defer b.noteSize(size)
	env, err := wire.DecodeEnvelope(d.Body(), b.cfg.MaxMessageSize)
	if err != nil {
		b.rejected.Add(1)
		b.warnRefused("dropping undecodable message", "service", s.id, "err", err)
		b.observe(Observation{Op: OpReject, ServiceID: s.id, Start: arrived, Err: err})
		_ = d.Reject(false)
		// A request that says where its reply goes learns why, instead
		// of waiting for its deadline.
		// The reply is published from the service's workers, which Close
		// waits for: this callback must not block.
		if replyTo, corr, ok := wire.ReplyAddress(d.Body(), b.cfg.MaxMessageSize); ok && b.validReplyTo(replyTo) {
			_ = s.sched.submit("", &job{run: func() { b.replyRefusal(s.id, replyTo, corr, err) }})
		}
		return
	}
	if err := refuseReservedHeader(env); err != nil {
		b.refuse(s.id, env, d, err)
		return
	}
	if b.takeDrainMarker(env) {
		_ = d.Ack()
		return
	}
	if isMarker(env) {
		// Another bus's marker (it drains this queue too, or drained it
		// before): never handle it; give it back for its owner unless it
		// is stale.
		// The pause keeps a node that is the queue's only consumer (an
		// evicted node still consuming while survivors drain it) from
		// spinning the marker between the broker and itself.
		if now := time.Now(); markerUnbounded(env) || b.deadlineOf(env, arrived).late(now) || b.markerExpired(env.ID, now) {
			_ = d.Ack()
		} else {
			b.holdMarker(d)
		}
		return
	}
	if env.Kind != wire.KindSend && env.Kind != wire.KindRequest {
		b.refuse(s.id, env, d, message.ErrBadRequest.WithDetails(fmt.Sprintf("a %s cannot be sent to a service queue", env.Kind)))
		return
	}
	if env.Kind == wire.KindRequest && !b.validReplyTo(env.ReplyTo) {
		// Replying would publish, with this node's rights, into whatever
		// queue the sender named: never run it, never answer it.
		b.rejected.Add(1)
		b.warnRefused("dropping a request whose reply-to is not a reply queue", "service", s.id, "type", env.Type, "id", env.ID, "reply_to", truncate(env.ReplyTo, 64))
		b.observe(Observation{Op: OpReject, Type: env.Type, ServiceID: s.id, ID: env.ID, Resource: env.ResourceUUID, Start: arrived,
			Err: message.ErrBadRequest.WithDetails("reply-to is not a reply queue")})
		_ = d.Reject(false)
		return
	}
	dl := b.deadlineOf(env, arrived)
	if dl.late(arrived) {
		b.refuseLate(s.id, env, d, arrived, dl)
		return
	}
	j := &job{
		run: func() {
			s.started()
			defer s.finished()
			b.handle(s, env, d, arrived, dl)
			b.noteSize(size)
		},
		d: d,
	}
	key := ""
	if env.ResourceUUID != "" {
		key = env.ResourceUUID // each service has its own lines
	}
	if err := s.sched.submit(key, j); err != nil {
		if errors.Is(err, message.ErrClosed) {
			_ = d.Reject(true) // another consumer, or this node's successor, takes it
			return
		}
		b.refuse(s.id, env, d, message.ErrBusy.WithDetails(fmt.Sprintf(
			"%d messages about resource %s are already waiting on node %s", b.cfg.MaxQueuePerResource, env.ResourceUUID, b.node)))
	}
}

// handle runs the handler for one message, replies and acknowledges. Just
// before the handler starts it checks again that the deadline has not
// passed and that the transport still holds the delivery (see
// [driver.Delivery.Check]): a process paused after reading the message, or cut
// off from the broker, never runs what the broker may have handed to
// another consumer, nor anything whose caller has given up.
func (b *CloudBus) handle(s *service, env *wire.Envelope, d driver.Delivery, arrived time.Time, dl deadline) {
	if dl.late(time.Now()) {
		b.refuseLate(s.id, env, d, arrived, dl)
		return
	}
	lc := dl.context(b.base)
	defer lc.stop()
	var ctx context.Context = lc
	if err := d.Check(ctx); err != nil {
		given := errors.Is(err, message.ErrUnavailable) || errors.Is(err, message.ErrClosed)
		if !given && dl.late(time.Now()) {
			// The deadline cut the check before the broker answered:
			// the message is late, refused as any late message is
			// (kept, it would be held from every consumer until the
			// channel closes).
			b.refuseLate(s.id, env, d, arrived, dl)
			return
		}
		// Do not run it. The transport gave it back already (its
		// channel or connection closed), or the bus is closing: then
		// it is released to its queue.
		b.lost.Add(1)
		b.log.Debug("not running a delivery the transport may no longer hold", "service", s.id, "type", env.Type, "id", env.ID, "err", err)
		b.observe(Observation{Op: OpReject, Type: env.Type, ServiceID: s.id, ID: env.ID, Resource: env.ResourceUUID,
			Headers: env.Headers, Start: time.Now(), Deadline: dl.at, Err: err})
		if !given {
			_ = d.Release()
		}
		return
	}
	if dl.late(time.Now()) {
		b.refuseLate(s.id, env, d, arrived, dl)
		return
	}

	var payload any
	var err error
	if _, raw := s.handler.(rawHandler); raw {
		// The handler forwards the body undecoded; the bus it forwards
		// to decodes it and checks its resource before anything runs.
		// A type nobody here registered is refused as decoding would.
		if !b.reg.Known(env.Type) {
			_, err = b.reg.Decode(env.Type, nil)
		}
	} else if payload, err = b.reg.Decode(env.Type, env.Body); err == nil {
		err = checkResource(env, payload)
	}
	if err != nil {
		b.refuse(s.id, env, d, err)
		return
	}
	// The last check, with the instant the handler starts: a long decode,
	// or a pause of the process since the checks above, cannot start it
	// late. A pause from here on finds ctx already ended when it resumes.
	start := time.Now()
	if dl.late(start) {
		b.refuseLate(s.id, env, d, arrived, dl)
		return
	}
	ctx = incomingTrace(ctx, env)
	ctx, end := b.startSpan(ctx, SpanInfo{Op: OpHandle, Type: env.Type, ServiceID: s.id, ID: env.ID, Resource: env.ResourceUUID})
	resp, err := b.invoke(ctx, s.handler, &Request{env: env, Payload: payload, bus: b, deadline: dl.at})
	end(err)
	obs := Observation{Op: OpHandle, Type: env.Type, ServiceID: s.id, ID: env.ID, Resource: env.ResourceUUID, Headers: env.Headers,
		Start: start, Deadline: dl.at, Duration: time.Since(start), Queued: start.Sub(arrived), Err: err}
	if errors.Is(err, ErrRelease) {
		obs.Op = OpRelease
		b.observe(obs)
		b.release(s.id, env, d, err)
		return
	}
	b.observe(obs)
	if env.Kind == wire.KindRequest && err != nil && nothingRan(err) {
		// A refusal says the request did not run, which holds only if
		// it never will: a delivery given back meanwhile (the bus closed
		// under the handler, the connection dropped) runs again where
		// the broker hands it next, and that run answers the caller.
		// Only what the transport knows at once counts (a closed channel,
		// a lost connection, a delivery settled): a check that would wait
		// for the broker's answer after a pause of this process is cut
		// short, and the refusal goes out as before.
		cctx, cancel := context.WithTimeout(context.Background(), refusalCheckWait)
		cerr := d.Check(cctx)
		cut := cctx.Err() != nil
		cancel()
		if cerr != nil && !cut {
			b.lost.Add(1)
			b.log.Debug("not answering a refusal for a delivery given back: the request runs again", "service", s.id, "type", env.Type, "id", env.ID,
				"refusal", err, "err", cerr)
			_ = d.Release() // given back already: a no-op, or the broker refuses it harmlessly
			return
		}
	}
	if env.Kind == wire.KindRequest {
		if rerr := b.sendReply(s.id, env, resp, err); rerr != nil && !errors.Is(rerr, message.ErrNoRoute) {
			// The caller may still be waiting; the handler ran but nobody
			// can hear it: give the message back rather than drop it.
			b.release(s.id, env, d, rerr)
			return
		}
	} else if err != nil {
		b.failOneWay(s.id, env, d, dl, start, err)
		return
	}
	_ = d.Ack()
}

// refusalCheckWait bounds the check of a refused request's delivery.
const refusalCheckWait = 50 * time.Millisecond

// nothingRan reports whether err, a handler's, says the request did
// not run (message.RetrySafe or message.RetryNever).
func nothingRan(err error) bool {
	switch message.AsError(err).Retry() {
	case message.RetrySafe, message.RetryNever:
		return true
	}
	return false
}

// release gives d back to its queue, unanswered, without counting it as
// a failed delivery ([driver.Delivery.Release]).
func (b *CloudBus) release(serviceID string, env *wire.Envelope, d driver.Delivery, why error) {
	b.released.Add(1)
	b.log.Debug("message given back to its queue", "service", serviceID, "type", env.Type, "id", env.ID, "why", why)
	_ = d.Release()
}

// refuseLate refuses a message whose deadline passed before it could
// start: it never runs, and it is counted (Stats.Late, OpReject with
// message.ErrTimeout). A request is answered only while its caller may
// still be listening (within lateReplyGrace of the deadline): later, the
// reply would only be dropped as late.
func (b *CloudBus) refuseLate(serviceID string, env *wire.Envelope, d driver.Delivery, arrived time.Time, dl deadline) {
	now := time.Now()
	late := now.Sub(dl.at)
	b.late.Add(1)
	b.rejected.Add(1)
	err := message.ErrTimeout.WithDetails(fmt.Sprintf(
		"the sender's deadline passed %s before the message could start on node %s (it arrived %s before); the handler did not run",
		late.Round(time.Millisecond), b.node, now.Sub(arrived).Round(time.Millisecond)))
	b.log.Debug("late message not run", "service", serviceID, "type", env.Type, "id", env.ID, "late", late)
	b.observe(Observation{Op: OpReject, Type: env.Type, ServiceID: serviceID, ID: env.ID, Resource: env.ResourceUUID,
		Headers: env.Headers, Start: now, Deadline: dl.at, Err: err})
	if env.Kind == wire.KindSend {
		b.deadLetter(serviceID, env, d, Observation{Type: env.Type, ServiceID: serviceID, ID: env.ID, Resource: env.ResourceUUID,
			Headers: env.Headers, Start: now, Deadline: dl.at, Err: err}, fmt.Sprintf(
			"its deadline passed %s before it could start on node %s; it did not run", late.Round(time.Millisecond), b.node))
		return
	}
	if late < lateReplyGrace {
		_ = b.sendReply(serviceID, env, nil, err)
	}
	_ = d.Ack()
}

// lateReplyGrace is how long after its deadline a late request is still
// answered with a timeout: the caller's own clock may run behind by the
// cluster clock's error. Later, nobody listens.
const lateReplyGrace = time.Second

// checkResource refuses a payload that names a resource (message.Routed)
// but arrived without one in its envelope, or with another one: such a
// message was not routed to the resource's owner, so no node may run it.
func checkResource(env *wire.Envelope, payload any) error {
	res, routed, err := message.ResourceOf(payload)
	if !routed {
		return nil
	}
	if err != nil {
		return err
	}
	switch env.ResourceUUID {
	case res:
		return nil
	case "":
		return message.ErrBadRequest.WithDetails(fmt.Sprintf(
			"%s is about resource %s but its envelope has no resource_uuid, so it was not routed to the resource's owner; set resource_uuid to %s (the Go SDK does so for message.Routed types)",
			env.Type, res, res))
	default:
		return message.ErrBadRequest.WithDetails(fmt.Sprintf(
			"%s is about resource %s but its envelope's resource_uuid is %s; they must be equal", env.Type, res, env.ResourceUUID))
	}
}

// invoke calls h, turning a panic into message.ErrInternal.
func (b *CloudBus) invoke(ctx context.Context, h Handler, req *Request) (resp any, err error) {
	defer b.handled.Add(1)
	defer func() {
		if r := recover(); r != nil {
			b.log.Error("handler panicked", "service", req.env.ServiceID, "type", req.env.Type,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			resp, err = nil, message.ErrInternal.WithDetails(fmt.Sprintf("handler of %s panicked: %v", req.env.Type, r))
		}
	}()
	return h.Handle(ctx, req)
}

// refuse answers a message that no handler ran for, and acknowledges it;
// a one-way message refused for a reason that may pass (busy) is tried
// again instead (see failOneWay).
func (b *CloudBus) refuse(serviceID string, env *wire.Envelope, d driver.Delivery, err error) {
	b.rejected.Add(1)
	b.observe(Observation{Op: OpReject, Type: env.Type, ServiceID: serviceID, ID: env.ID, Resource: env.ResourceUUID,
		Headers: env.Headers, Start: time.Now(), Err: err})
	if env.Kind == wire.KindSend {
		b.failOneWay(serviceID, env, d, b.deadlineOf(env, time.Now()), time.Time{}, err)
		return
	}
	if env.Kind == wire.KindRequest {
		_ = b.sendReply(serviceID, env, nil, err)
	} else {
		b.warnRefused("refused a message", "service", serviceID, "type", env.Type, "kind", env.Kind, "id", env.ID, "err", err)
	}
	_ = d.Ack()
}

// sendReply publishes the reply to a request: resp (a busx.Raw as it is,
// any other value encoded), or err with its code. It returns the
// publish's error.
func (b *CloudBus) sendReply(serviceID string, req *wire.Envelope, resp any, err error) error {
	reply := req.Reply()
	reply.Source = b.node
	if raw, ok := resp.(busx.Raw); err == nil && ok {
		reply.Type, reply.Body = raw.Type, raw.Body // encoded already: sent as is
	} else if err == nil && !isNil(resp) {
		name, body, encErr := b.reg.Encode(resp)
		if encErr != nil {
			err = message.ErrInternal.WithDetails(fmt.Sprintf("handler of %s returned %T, which cannot be sent", req.Type, resp)).WithCause(encErr)
		} else {
			reply.Type, reply.Body = name, body
			reply.MarkBodyMarshaled() // Registry.Encode's output: not checked again
		}
	}
	if err != nil {
		reply.Error = message.AsError(err)
	}
	data, encErr := wire.EncodeEnvelope(reply, b.cfg.MaxMessageSize)
	if encErr != nil {
		// Without the body and the echoed headers (which alone may
		// bring a request near the limit), the error always fits.
		reply.Type, reply.Body, reply.Headers = "", nil, nil
		reply.Error = message.ErrInternal.WithDetails(fmt.Sprintf("reply to %s could not be sent", req.Type)).WithCause(encErr)
		data, encErr = wire.EncodeEnvelope(reply, b.cfg.MaxMessageSize)
		if encErr != nil {
			b.log.Error("cannot encode reply", "service", serviceID, "type", req.Type, "err", encErr)
			return nil // nothing better can be sent; giving it back would fail the same way
		}
	}
	ctx := newReplyContext(b.cfg.ReplyTimeout)
	defer ctx.stop()
	start := time.Now()
	perr := b.publishData(ctx, "", req.ReplyTo, data, isFast(req))
	b.observe(Observation{Op: OpReply, Type: reply.Type, ServiceID: serviceID, ID: req.ID, Start: start, Duration: time.Since(start), Err: perr})
	if perr != nil {
		// No route means the caller is gone; its call ended already.
		b.log.Debug("reply not delivered", "service", serviceID, "reply_to", req.ReplyTo, "err", perr)
	}
	return perr
}

// onReply hands a reply to its pending call, or counts it as late.
func (b *CloudBus) onReply(d driver.Delivery) {
	b.noteSize(len(d.Body()))
	env, err := wire.DecodeEnvelope(d.Body(), b.cfg.MaxMessageSize)
	_ = d.Ack()
	if err != nil || env.Kind != wire.KindReply {
		b.rejected.Add(1)
		b.warnRefused("dropping malformed reply", "err", err)
		return
	}
	b.mu.Lock()
	p, ok := b.pending[env.CorrelationID]
	if ok {
		delete(b.pending, env.CorrelationID)
	}
	b.mu.Unlock()
	if !ok {
		b.lateReplies.Add(1)
		b.observe(Observation{Op: OpLateReply, Type: env.Type})
		b.log.Debug("late reply dropped", "correlation_id", env.CorrelationID, "from", env.Source)
		return
	}
	p.finish(env, nil)
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// markerGiveBackPause is how long a bus holds another bus's drain marker
// before giving it back to its queue.
const markerGiveBackPause = 50 * time.Millisecond

// validReplyTo reports whether addr may receive replies: a reply queue of
// this bus's prefix ("<prefix>.reply.<anything>") or a broker-named
// queue ("amq.gen-..."), at most 255 bytes, printable ASCII. A request
// naming anything else (a service queue, api.portal) is dropped unrun:
// a reply must never be a way to write into another queue.
func (b *CloudBus) validReplyTo(addr string) bool {
	if len(addr) == 0 || len(addr) > 255 {
		return false
	}
	for i := 0; i < len(addr); i++ {
		if c := addr[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	rest, ok := strings.CutPrefix(addr, b.cfg.Prefix+".reply.")
	if !ok {
		rest, ok = strings.CutPrefix(addr, "amq.gen-")
	}
	return ok && rest != ""
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// replyRefusal answers a request that could not be decoded with err, at
// the reply address its raw bytes named.
func (b *CloudBus) replyRefusal(serviceID, replyTo, correlationID string, err error) {
	reply := &wire.Envelope{ID: message.NewUUID(), Kind: wire.KindReply, ServiceID: replyTo, CorrelationID: correlationID,
		Source: b.node, Error: message.AsError(err)}
	data, encErr := wire.EncodeEnvelope(reply, b.cfg.MaxMessageSize)
	if encErr != nil {
		reply.Error = message.ErrBadRequest.WithDetails("the request could not be decoded")
		if data, encErr = wire.EncodeEnvelope(reply, b.cfg.MaxMessageSize); encErr != nil {
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ReplyTimeout)
	defer cancel()
	if perr := b.tr.Publish(ctx, replyTo, data); perr != nil {
		b.log.Debug("refusal not delivered", "service", serviceID, "reply_to", truncate(replyTo, 64), "err", perr)
	}
}

// holdMarker gives a foreign drain marker back after markerGiveBackPause,
// on a timer that Close waits for; once the bus is closing, at once.
func (b *CloudBus) holdMarker(d driver.Delivery) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		giveBack(d)
		return
	}
	b.markers.Add(1)
	b.mu.Unlock()
	time.AfterFunc(markerGiveBackPause, func() {
		defer b.markers.Done()
		giveBack(d)
	})
}

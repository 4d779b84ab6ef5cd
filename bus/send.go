package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// pendingCall is a call waiting for its reply.
type pendingCall struct {
	typ    string
	target string
	node   string    // target node, "" for a shared id such as api.portal
	sent   time.Time // when it was registered, to tell a node's lives apart (abandonCalls)
	once   sync.Once
	done   chan struct{}
	reply  *wire.Envelope
	err    error
}

func (p *pendingCall) finish(reply *wire.Envelope, err error) {
	p.once.Do(func() {
		p.reply, p.err = reply, err
		close(p.done)
	})
}

// Send publishes msg, a value of a registered type, one-way to the service
// id target ("<service>.<node>" or api.portal). It returns once the
// transport accepted the message: there is no reply and no confirmation
// that a handler ran. A target whose queue does not exist fails at once
// with message.ErrNoRoute.
func (b *CloudBus) Send(ctx context.Context, target string, msg any, opts ...Option) error {
	start := time.Now()
	env, o, err := b.envelope(wire.KindSend, target, msg, opts)
	if err == nil {
		ctx, end := b.startSpan(ctx, spanOf(OpSend, env))
		stampTrace(ctx, env, false)
		ctx, cancel := bound(ctx, o, b.cfg.DefaultTimeout, false)
		defer cancel()
		err = b.publish(ctx, env)
		end(err)
	}
	if err != nil {
		err = fmt.Errorf("bus: send %s to %s: %w", typeOf(env), target, err)
	}
	b.observe(Observation{Op: OpSend, Type: typeOf(env), ServiceID: target, Duration: time.Since(start), Err: err})
	return err
}

// callAny is Call with the reply decoded as its registered type.
func (b *CloudBus) callAny(ctx context.Context, target string, msg any, opts ...Option) (any, error) {
	start := time.Now()
	typ, reply, err := b.call(ctx, target, msg, opts)
	var v any
	if err == nil && reply.Type != "" {
		v, err = b.reg.Decode(reply.Type, reply.Body)
		if err != nil {
			err = message.ErrBadReply.WithDetails(fmt.Sprintf("the handler ran, but its reply %s cannot be read here", reply.Type)).WithCause(err)
		}
	}
	if err != nil {
		err = fmt.Errorf("bus: call %s on %s: %w", typ, target, err)
	}
	b.observe(Observation{Op: OpCall, Type: typ, ServiceID: target, Duration: time.Since(start), Err: err})
	return v, err
}

// Call sends msg to the service id target ("<service>.<node>" or
// api.portal) and waits for the reply, decoded as Resp (a registered type
// T or *T; any for the reply's registered type; the zero Resp for a reply
// without body). A reply of another type fails with message.ErrBadReply:
// the handler ran, only its reply could not be read as Resp. A reply
// carrying an error returns it; match it with errors.Is against the
// message sentinels.
//
// Call never hangs: ctx's deadline, [WithTimeout] or
// Config.DefaultTimeout bounds it, and it then fails with an error
// matching message.ErrTimeout. A canceled ctx fails with
// message.ErrCanceled, a closed bus with message.ErrClosed. Each call
// matches its reply by a correlation id of its own, so calls sharing a
// message id ([WithID]) each get their own reply. Call never retries.
func Call[Resp any](ctx context.Context, b *CloudBus, target string, msg any, opts ...Option) (Resp, error) {
	var zero Resp
	v, err := b.callAny(ctx, target, msg, opts...)
	if err != nil || v == nil {
		return zero, err
	}
	if r, ok := v.(Resp); ok { // Resp is *T
		return r, nil
	}
	if r, ok := derefAs[Resp](v); ok { // Resp is T
		return r, nil
	}
	typ, _ := b.reg.NameOf(msg)
	got, _ := b.reg.NameOf(v)
	return zero, fmt.Errorf("bus: call %s on %s: %w", typ, target,
		message.ErrBadReply.WithDetails(fmt.Sprintf("the handler ran and replied %s, not the requested %T", got, zero)))
}

// call sends the request and waits for its reply; it returns the
// request's type name (for errors and observations) with the outcome.
func (b *CloudBus) call(ctx context.Context, target string, msg any, opts []Option) (string, *wire.Envelope, error) {
	env, o, err := b.envelope(wire.KindRequest, target, msg, opts)
	typ := typeOf(env)
	if err != nil {
		if env == nil { // closed or unencodable: name it if registered
			typ, _ = b.reg.NameOf(msg)
		}
		return typ, nil, err
	}
	ctx, end := b.startSpan(ctx, spanOf(OpCall, env))
	stampTrace(ctx, env, false)
	reply, err := b.roundTrip(ctx, env, o)
	end(err)
	return typ, reply, err
}

// spanOf describes env's operation to a Tracer.
func spanOf(op Op, env *wire.Envelope) SpanInfo {
	return SpanInfo{Op: op, Type: env.Type, ServiceID: env.ServiceID, ID: env.ID, Resource: env.ResourceUUID}
}

// callRaw is callAny with a body encoded already and the reply left
// encoded (busx.Engine.CallRaw): a forward that neither decodes nor
// encodes a payload.
func (b *CloudBus) callRaw(ctx context.Context, target, typ string, body []byte, o busx.CallOptions) (busx.Raw, error) {
	start := time.Now()
	var reply *wire.Envelope
	var err error = message.ErrClosed
	if !b.isClosed() {
		var env *wire.Envelope
		if env, err = b.encoded(wire.KindRequest, target, typ, body, nil, o); err == nil {
			s := spanOf(OpCall, env)
			s.Forward = true
			ctx, end := b.startSpan(ctx, s)
			stampTrace(ctx, env, false)
			reply, err = b.roundTrip(ctx, env, o)
			end(err)
		}
	}
	var raw busx.Raw
	if err == nil {
		raw = busx.Raw{Type: reply.Type, Body: reply.Body}
	} else {
		err = fmt.Errorf("bus: call %s on %s: %w", typ, target, err)
	}
	b.observe(Observation{Op: OpCall, Type: typ, ServiceID: target, Duration: time.Since(start), Err: err, Forward: true})
	return raw, err
}

// roundTrip publishes the request env and waits for its reply, bounded
// by o's timeout, ctx's deadline, or the default timeout. A reply that
// carries an error returns it.
func (b *CloudBus) roundTrip(ctx context.Context, env *wire.Envelope, o busx.CallOptions) (*wire.Envelope, error) {
	ctx, cancel := bound(ctx, o, b.cfg.DefaultTimeout, true)
	defer cancel()

	// The reply is matched by a correlation id of this call's own, not by
	// the message id, which several calls may share (WithID).
	env.CorrelationID = message.NewUUID()
	env.ReplyTo = b.replyAddress()
	p := &pendingCall{typ: env.Type, target: env.ServiceID, sent: time.Now(), done: make(chan struct{})}
	if _, node, ok := SplitServiceID(env.ServiceID); ok {
		p.node = node
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, message.ErrClosed
	}
	b.pending[env.CorrelationID] = p
	b.mu.Unlock()
	defer b.forget(env.CorrelationID)

	published, err := b.startRequest(ctx, env)
	if err != nil {
		return nil, err
	}
	for {
		select {
		case err := <-published:
			if err == nil {
				published = nil // confirmed: the reply is what is left
				continue
			}
			select {
			case <-p.done: // the reply came: the request arrived after all
				return p.result()
			default:
			}
			if ctx.Err() != nil {
				return nil, ctxError(ctx)
			}
			return nil, err
		case <-p.done:
			return p.result()
		case <-ctx.Done():
			return nil, ctxError(ctx)
		}
	}
}

// result is the call's outcome once done is closed: the reply, or the
// error it carries, or why the call ended without one.
func (p *pendingCall) result() (*wire.Envelope, error) {
	if p.err != nil {
		return nil, p.err
	}
	if p.reply.Error != nil {
		return nil, p.reply.Error
	}
	return p.reply, nil
}

// forget removes a pending call; a reply arriving later is late.
func (b *CloudBus) forget(id string) {
	b.mu.Lock()
	delete(b.pending, id)
	b.mu.Unlock()
}

// Broadcast publishes event, a value of a registered type, to every node's
// bus on this prefix, this one included; each receives it once and hands
// it to its subscribers for the event's type.
func (b *CloudBus) Broadcast(ctx context.Context, event any, opts ...Option) error {
	start := time.Now()
	env, o, err := b.envelope(wire.KindEvent, "", event, opts)
	if err == nil {
		ctx, end := b.startSpan(ctx, spanOf(OpBroadcast, env))
		defer func() { end(err) }()
		stampTrace(ctx, env, false)
		var data []byte
		data, err = wire.EncodeEnvelope(env, b.cfg.MaxMessageSize)
		if err == nil {
			ctx, cancel := bound(ctx, o, b.cfg.DefaultTimeout, false)
			defer cancel()
			err = b.tr.Broadcast(ctx, b.fan, data)
		}
	}
	if err != nil {
		err = fmt.Errorf("bus: broadcast %s: %w", typeOf(env), err)
	}
	b.observe(Observation{Op: OpBroadcast, Type: typeOf(env), Duration: time.Since(start), Err: err})
	return err
}

// forward publishes the message r carries to target, unchanged but for
// its service id and the given headers (added, or replacing those of the
// same name): the same id, kind, type, resource, reply-to and deadline.
// A request forwarded so is answered by its new handler directly to the
// original caller. The handler that forwards should then neither reply
// nor fail (for a one-way message, return nil). It fails with
// message.ErrNoRoute if target's queue does not exist, and with
// message.ErrTimeout once the message's deadline has passed. The
// Observer sees it as an OpSend with Forward set.
func (b *CloudBus) forward(ctx context.Context, r *Request, target string, headers map[string]string) (err error) {
	start := time.Now()
	env := *r.env
	defer func() {
		b.observe(Observation{Op: OpSend, Type: env.Type, ServiceID: target, ID: env.ID, Resource: env.ResourceUUID,
			Duration: time.Since(start), Err: err, Forward: true})
	}()
	env.ServiceID = target
	if len(headers) > 0 {
		h := make(map[string]string, len(env.Headers)+len(headers))
		maps.Copy(h, env.Headers)
		maps.Copy(h, headers)
		env.Headers = h
	}
	env.Timeout, env.Deadline = 0, 0
	if dl, ok := r.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	op := OpSend
	if env.Kind == wire.KindRequest {
		op = OpCall
	}
	s := spanOf(op, &env)
	s.Forward = true
	ctx, end := b.startSpan(ctx, s)
	// The forward continues the handler's trace (ctx's), not the
	// sender's, unless headers name one.
	_, named := headers[HeaderTraceParent]
	stampTrace(ctx, &env, !named)
	err = b.publish(ctx, &env) // stamps the deadline again
	end(err)
	if err != nil {
		return fmt.Errorf("bus: forward %s to %s: %w", env.Type, target, err)
	}
	return nil
}

// abandonCalls fails at once every call pending towards node with an
// error matching message.ErrNodeLeft, and returns how many it failed; with
// a non-zero before, only those sent before it (to a life of node that
// left then: calls sent later go to the life that joined since). The node
// calls it when it learns that node left the cluster: the outcome of those
// calls is unknown (the message may still run, there or on the new
// owner). A reply arriving later is dropped as late.
func (b *CloudBus) abandonCalls(node string, before time.Time, cause error) int {
	b.mu.Lock()
	var hit []*pendingCall
	for id, p := range b.pending {
		if p.node == node && (before.IsZero() || p.sent.Before(before)) {
			hit = append(hit, p)
			delete(b.pending, id)
		}
	}
	b.mu.Unlock()
	err := message.ErrNodeLeft.WithDetails("node " + node)
	if cause != nil {
		err = err.WithCause(cause)
	}
	for _, p := range hit {
		p.finish(nil, err)
	}
	return len(hit)
}

// envelope builds the envelope of an outgoing message.
func (b *CloudBus) envelope(kind wire.Kind, target string, msg any, opts []Option) (*wire.Envelope, busx.CallOptions, error) {
	o := applyOptions(opts)
	if b.isClosed() {
		return nil, o, message.ErrClosed
	}
	name, body, err := b.reg.Encode(msg)
	if err != nil {
		return nil, o, err
	}
	env, err := b.encoded(kind, target, name, body, msg, o)
	if env != nil {
		env.MarkBodyMarshaled() // Registry.Encode's output: not checked again
	}
	return env, o, err
}

// encoded builds the envelope of an outgoing message of type name whose
// body is encoded already. msg is the payload, for the resource it names
// (message.Routed); nil when only o names one (WithResource). It returns
// the envelope built so far with an error. o.Headers, the call's own map,
// becomes the envelope's.
func (b *CloudBus) encoded(kind wire.Kind, target, name string, body []byte, msg any, o busx.CallOptions) (*wire.Envelope, error) {
	var err error
	env := &wire.Envelope{
		Kind:      kind,
		Type:      name,
		ServiceID: target,
		Source:    b.node,
		Headers:   o.Headers,
		Body:      body,
	}
	if env.ID, err = o.MessageID(); err != nil {
		return env, err
	}
	if env.ID == "" {
		env.ID = message.NewUUID()
	}
	retry, err := o.Retries()
	if err != nil {
		return env, err
	}
	if retry > 0 && kind != wire.KindEvent {
		if env.Headers == nil { // o.Headers is this call's own map
			env.Headers = make(map[string]string, 1)
		}
		env.Headers[HeaderRetry] = strconv.Itoa(retry)
	}
	if kind != wire.KindEvent {
		if b.fastOption(o) {
			markFast(env)
		} else if o.Delivery != 0 { // WithDelivery(Confirmed) wins over a header passed on
			delete(env.Headers, HeaderDelivery)
		}
	}
	if kind == wire.KindEvent {
		if o.Resource != "" {
			if env.ResourceUUID, err = message.NormalizeUUID(o.Resource); err != nil {
				return env, err
			}
		}
	} else if env.ResourceUUID, err = busx.ResourceOf(msg, o); err != nil {
		return env, err
	}
	if kind != wire.KindEvent && target == "" {
		return env, message.ErrBadRequest.WithDetails("empty target service id")
	}
	return env, nil
}

// bound applies the per-call timeout to ctx; with always, a ctx without
// deadline gets def. It returns the remaining time so the envelope can
// carry it.
func bound(ctx context.Context, o busx.CallOptions, def time.Duration, always bool) (context.Context, context.CancelFunc) {
	if o.Timeout > 0 {
		return context.WithTimeout(ctx, o.Timeout)
	}
	if _, ok := ctx.Deadline(); !ok && always {
		return context.WithTimeout(ctx, def)
	}
	return ctx, func() {}
}

// publishEncoded publishes data, env encoded, to env's service id.
func (b *CloudBus) publishEncoded(ctx context.Context, env *wire.Envelope, data []byte, fast bool) error {
	entry, queue := b.route(env)
	return b.publishData(ctx, entry, queue, data, fast)
}

// route returns the queue env goes to, and the entry it goes through ("",
// but api.portal's entry for the portal).
func (b *CloudBus) route(env *wire.Envelope) (entry, queue string) {
	if env.ServiceID == APIPortal {
		entry = b.apiEntry()
	}
	return entry, b.queueName(env.ServiceID)
}

// encodeStamped stamps env's deadline from ctx and encodes env.
func (b *CloudBus) encodeStamped(ctx context.Context, env *wire.Envelope) ([]byte, error) {
	if err := b.stampDeadline(ctx, env); err != nil {
		return nil, err
	}
	return wire.EncodeEnvelope(env, b.cfg.MaxMessageSize)
}

// startRequest publishes env, a call's request. With a transport that
// can report a confirmed publish's outcome later (driver.PublishStarter),
// in the confirmed mode, it returns at once with a channel that receives
// the outcome: the call's reply may come first, and ends the call. Else
// it publishes, and returns a nil channel once the transport took env.
func (b *CloudBus) startRequest(ctx context.Context, env *wire.Envelope) (<-chan error, error) {
	ps, ok := b.tr.(driver.PublishStarter)
	if !ok || isFast(env) {
		return nil, b.publish(ctx, env)
	}
	data, err := b.encodeStamped(ctx, env)
	if err != nil {
		return nil, err
	}
	entry, queue := b.route(env)
	return ps.StartPublish(ctx, entry, queue, data), nil
}

// publish stamps the deadline, encodes and publishes env.
func (b *CloudBus) publish(ctx context.Context, env *wire.Envelope) error {
	data, err := b.encodeStamped(ctx, env)
	if err != nil {
		return err
	}
	if err := b.publishEncoded(ctx, env, data, isFast(env)); err != nil {
		if ctx.Err() != nil {
			return ctxError(ctx)
		}
		return err
	}
	return nil
}

func (b *CloudBus) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// ctxError converts ctx's error into the coded error of its kind, still
// matching the context package's sentinel.
func ctxError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return message.ErrTimeout.WithCause(context.DeadlineExceeded)
	}
	return message.ErrCanceled.WithCause(ctx.Err())
}

func typeOf(env *wire.Envelope) string {
	if env == nil {
		return ""
	}
	return env.Type
}

func derefAs[T any](v any) (T, bool) {
	var zero T
	p, ok := v.(*T)
	if !ok || p == nil {
		return zero, false
	}
	return *p, true
}

// replyAddress is the name on the broker of the bus's reply queue now: a
// transport that declares its temporary queues under a new name after a
// reconnect (amqpbus) says which.
func (b *CloudBus) replyAddress() string {
	if a, ok := b.tr.(interface{ Address(queue string) string }); ok {
		return a.Address(b.reply)
	}
	return b.reply
}

package bus

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"time"

	"github.com/cloudbus-go/cloudbus/message"
)

// onDelivery takes a message off a service queue and schedules it. It
// never blocks: the scheduler queues the job or refuses it as busy.
func (b *CloudBus) onDelivery(s *service, d Delivery) {
	arrived := time.Now()
	env, err := message.DecodeEnvelope(d.Body(), b.cfg.MaxMessageSize)
	if err != nil {
		b.rejected.Add(1)
		b.log.Warn("dropping undecodable message", "service", s.id, "err", err)
		b.observe(Observation{Op: OpReject, ServiceID: s.id, Err: err})
		_ = d.Reject(false)
		return
	}
	if b.takeDrainMarker(env) {
		_ = d.Ack()
		return
	}
	if env.Kind != message.KindSend && env.Kind != message.KindRequest {
		b.refuse(s.id, env, d, message.ErrBadRequest.WithDetails(fmt.Sprintf("a %s cannot be sent to a service queue", env.Kind)))
		return
	}
	j := &job{
		run:     func() { b.handle(s, env, d, arrived) },
		requeue: func() { _ = d.Reject(true) },
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

// handle runs the handler for one message, replies and acknowledges.
func (b *CloudBus) handle(s *service, env *message.Envelope, d Delivery, arrived time.Time) {
	queued := time.Since(arrived)
	var ctx context.Context
	var cancel context.CancelFunc
	var deadline time.Time
	if env.Timeout > 0 {
		left := env.Timeout - queued
		if left <= 0 {
			b.refuse(s.id, env, d, message.ErrTimeout.WithDetails(fmt.Sprintf("the sender's deadline passed after %s waiting on node %s; the handler did not run", queued.Round(time.Millisecond), b.node)))
			return
		}
		deadline = arrived.Add(env.Timeout)
		ctx, cancel = context.WithDeadline(b.base, deadline)
	} else {
		ctx, cancel = context.WithCancel(b.base)
	}
	defer cancel()

	payload, err := b.reg.Decode(env.Type, env.Body)
	if err == nil {
		err = checkResource(env, payload)
	}
	if err != nil {
		b.refuse(s.id, env, d, err)
		return
	}
	start := time.Now()
	resp, err := b.invoke(ctx, s.handler, &Request{Envelope: env, Payload: payload, Bus: b, deadline: deadline})
	b.observe(Observation{Op: OpHandle, Type: env.Type, ServiceID: s.id, Duration: time.Since(start), Queued: queued, Err: err})
	if env.Kind == message.KindRequest {
		b.sendReply(s.id, env, resp, err)
	} else if err != nil {
		b.log.Warn("handler failed on a one-way message", "service", s.id, "type", env.Type, "id", env.ID, "err", err)
	}
	_ = d.Ack()
}

// checkResource refuses a payload that names a resource (message.Routed)
// but arrived without one in its envelope, or with another one: such a
// message was not routed to the resource's owner, so no node may run it.
func checkResource(env *message.Envelope, payload any) error {
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
	defer func() {
		if r := recover(); r != nil {
			b.log.Error("handler panicked", "service", req.Envelope.ServiceID, "type", req.Envelope.Type,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			resp, err = nil, message.ErrInternal.WithDetails(fmt.Sprintf("handler of %s panicked: %v", req.Envelope.Type, r))
		}
	}()
	return h.Handle(ctx, req)
}

// refuse answers a message that no handler ran for, and acknowledges it.
func (b *CloudBus) refuse(serviceID string, env *message.Envelope, d Delivery, err error) {
	b.rejected.Add(1)
	b.observe(Observation{Op: OpReject, Type: env.Type, ServiceID: serviceID, Err: err})
	if env.Kind == message.KindRequest {
		b.sendReply(serviceID, env, nil, err)
	} else {
		b.log.Warn("refused a one-way message", "service", serviceID, "type", env.Type, "id", env.ID, "err", err)
	}
	_ = d.Ack()
}

// sendReply publishes the reply to a request: resp, or err with its code.
func (b *CloudBus) sendReply(serviceID string, req *message.Envelope, resp any, err error) {
	reply := req.Reply()
	reply.Source = b.node
	if err == nil && !isNil(resp) {
		name, body, encErr := b.reg.Encode(resp)
		if encErr != nil {
			err = message.ErrInternal.WithDetails(fmt.Sprintf("handler of %s returned %T, which cannot be sent", req.Type, resp)).WithCause(encErr)
		} else {
			reply.Type, reply.Body = name, body
		}
	}
	if err != nil {
		reply.Error = message.AsError(err)
	}
	data, encErr := message.EncodeEnvelope(reply, b.cfg.MaxMessageSize)
	if encErr != nil {
		reply.Type, reply.Body = "", nil
		reply.Error = message.ErrInternal.WithDetails(fmt.Sprintf("reply to %s could not be sent", req.Type)).WithCause(encErr)
		data, encErr = message.EncodeEnvelope(reply, b.cfg.MaxMessageSize)
		if encErr != nil {
			b.log.Error("cannot encode reply", "service", serviceID, "type", req.Type, "err", encErr)
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ReplyTimeout)
	defer cancel()
	start := time.Now()
	perr := b.tr.Publish(ctx, req.ReplyTo, data)
	b.observe(Observation{Op: OpReply, Type: reply.Type, ServiceID: serviceID, Duration: time.Since(start), Err: perr})
	if perr != nil {
		// No route means the caller is gone; its call ended already.
		b.log.Debug("reply not delivered", "service", serviceID, "reply_to", req.ReplyTo, "err", perr)
	}
}

// onReply hands a reply to its pending call, or counts it as late.
func (b *CloudBus) onReply(d Delivery) {
	env, err := message.DecodeEnvelope(d.Body(), b.cfg.MaxMessageSize)
	_ = d.Ack()
	if err != nil || env.Kind != message.KindReply {
		b.rejected.Add(1)
		b.log.Warn("dropping malformed reply", "err", err)
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

package bus

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// subEvent is a broadcast delivered to a subscriber.
type subEvent struct {
	Envelope *wire.Envelope // read-only
	Payload  any            // a pointer to the decoded body
}

type subscription struct {
	id  uint64
	typ string
	fn  func(context.Context, *subEvent)
}

type eventJob struct {
	env     *wire.Envelope
	payload any
}

var subscriptionIDs atomic.Uint64

// subscribe calls fn for every event of the registered type eventType.
func (b *CloudBus) subscribe(eventType string, fn func(ctx context.Context, ev *subEvent)) (unsubscribe func(), err error) {
	if !b.reg.Known(eventType) {
		return nil, fmt.Errorf("bus: subscribe %q: %w", eventType, message.ErrUnknownMessage.WithDetails("register the event type first"))
	}
	if b.cfg.ClientOnly {
		return nil, fmt.Errorf("bus: subscribe %q: a ClientOnly bus has no event queue: %w", eventType, message.ErrBadRequest)
	}
	s := &subscription{id: subscriptionIDs.Add(1), typ: eventType, fn: fn}
	b.mu.Lock()
	b.subs[eventType] = append(b.subs[eventType], s)
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		list := b.subs[eventType]
		for i, x := range list {
			if x.id == s.id {
				b.subs[eventType] = append(list[:i:i], list[i+1:]...)
				return
			}
		}
	}, nil
}

// Subscribe calls fn for every broadcast event of the registered type E
// that b receives, one event at a time, in arrival order, off the receive
// path: a slow subscriber delays other events, never service messages. fn
// must not block forever; its ctx ends when the bus closes and carries
// the event's trace context ([TraceContextFrom]); a panic is logged.
// unsubscribe is idempotent.
func Subscribe[E any](b *CloudBus, fn func(ctx context.Context, ev E)) (unsubscribe func(), err error) {
	name, err := message.NameFor[E](b.reg)
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe: %w", err)
	}
	return b.subscribe(name, func(ctx context.Context, ev *subEvent) {
		if p, ok := ev.Payload.(*E); ok && p != nil {
			fn(ctx, *p)
		}
	})
}

// onEvent queues an event for the dispatcher, waiting while it is full.
func (b *CloudBus) onEvent(d driver.Delivery) {
	env, err := wire.DecodeEnvelope(d.Body(), b.cfg.MaxMessageSize)
	_ = d.Ack()
	if err != nil || env.Kind != wire.KindEvent {
		b.rejected.Add(1)
		b.warnRefused("dropping malformed event", "err", err)
		return
	}
	payload, err := b.reg.Decode(env.Type, env.Body)
	if err != nil {
		b.log.Debug("dropping event of unknown type", "type", env.Type, "err", err)
		return
	}
	select {
	case b.events <- &eventJob{env: env, payload: payload}:
	case <-b.closing:
	}
}

func (b *CloudBus) dispatchEvents() {
	defer close(b.eventDone)
	for {
		select {
		case j := <-b.events:
			b.mu.Lock()
			subs := append([]*subscription(nil), b.subs[j.env.Type]...)
			b.mu.Unlock()
			ev := &subEvent{Envelope: j.env, Payload: j.payload}
			ctx := incomingTrace(b.base, j.env) // the broadcaster's trace goes on
			for _, s := range subs {
				b.runSubscriber(ctx, s, ev)
			}
			b.observe(Observation{Op: OpEvent, Type: j.env.Type})
		case <-b.closing:
			return
		}
	}
}

func (b *CloudBus) runSubscriber(ctx context.Context, s *subscription, ev *subEvent) {
	defer func() {
		if r := recover(); r != nil {
			b.log.Error("event subscriber panicked", "type", s.typ, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	s.fn(ctx, ev)
}

package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// Limits of reading the dead-letter queue.
const (
	// MaxDeadLetters bounds the messages DeadLetters returns and the
	// messages ReplayDeadLetters looks through, from the queue's head: each
	// is held, unacknowledged, until the read ends.
	MaxDeadLetters = 10000
	// deadIdle is how long a read waits for the next message it counted
	// before it ends with fewer: another reader holds the rest.
	deadIdle = 2 * time.Second
)

// DeadLetter is a message in the dead-letter queue (Config.DeadLetterQueue):
// a one-way message whose attempts or deadline ran out, or a message
// that every consumer crashed on (see "One-way messages" and "Delivery
// guarantees" in the package documentation).
type DeadLetter struct {
	// ID is the message's id; "" if the bytes are not a message (Err).
	ID string `json:"id"`
	// Kind is "send" (one-way) or "request".
	Kind string `json:"kind,omitempty"`
	// Type is the registered name of the body's type.
	Type string `json:"type,omitempty"`
	// ServiceID is the service id it was sent to.
	ServiceID string `json:"service_id,omitempty"`
	// Resource is the resource it is about, if it names one.
	Resource string `json:"resource,omitempty"`
	// Source names its sender.
	Source string `json:"source,omitempty"`
	// Queue is the queue it was moved out of.
	Queue string `json:"queue,omitempty"`
	// Reason says why it was moved.
	Reason string `json:"reason,omitempty"`
	// Timeout is the time it had to run when it was sent; 0 if none.
	Timeout time.Duration `json:"timeout_ns,omitempty"`
	// Headers are the message's headers.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the message's body, its JSON as sent.
	Body json.RawMessage `json:"body,omitempty"`
	// Err says why the bytes are not a message; such an entry cannot be
	// replayed.
	Err string `json:"error,omitempty"`
}

// ReplayResult says what ReplayDeadLetters did.
type ReplayResult struct {
	// Replayed lists the ids sent again, in queue order; an id appears
	// once per copy of the message the queue held.
	Replayed []string `json:"replayed"`
	// Missing lists the ids asked for that were not among the messages
	// read.
	Missing []string `json:"missing"`
}

// DeadLetters returns the first max messages of the dead-letter queue
// (all of them up to MaxDeadLetters if max is 0 or more), oldest first,
// and leaves them there. Each is held unacknowledged until the read ends,
// so a concurrent reader sees only the others; neither removes anything.
// The transport must implement driver.MessageCounter (amqpbus and
// membus do).
func (b *CloudBus) DeadLetters(ctx context.Context, max int) ([]DeadLetter, error) {
	if max <= 0 || max > MaxDeadLetters {
		max = MaxDeadLetters
	}
	var out []DeadLetter
	err := b.scanDead(ctx, max, func(env *wire.Envelope, dl DeadLetter, _ func() error) error {
		out = append(out, dl)
		return nil
	})
	return out, err
}

// ReplayDeadLetters sends the messages of the dead-letter queue with
// these ids again, unchanged but for their deadline, to the service id
// each was sent to, and removes them from the queue once the broker took
// them. A replayed message has again the time to run it had when it was
// first sent (DeadLetter.Timeout), counted from now; a request is sent
// again as a one-way message, since its caller stopped waiting long ago.
// It looks through the first MaxDeadLetters messages; the ids it did not
// find are in the result's Missing. It stops at the first message it
// cannot send (the error says which; that one and the rest stay). Under
// a fault between the send and the removal the message is in both
// places: handlers must be idempotent, as for every message the bus
// delivers at least once.
//
// A node (package service) replays through its ring instead, to the
// service's owner of the message's resource now: use
// service.Node.ReplayDeadLetters there.
func (b *CloudBus) ReplayDeadLetters(ctx context.Context, ids ...string) (ReplayResult, error) {
	return b.replayDead(ctx, ids, nil)
}

// replayDead is ReplayDeadLetters; route, if not nil, sets each
// message's ServiceID (and headers) before it is sent again.
func (b *CloudBus) replayDead(ctx context.Context, ids []string, route func(env *wire.Envelope) error) (ReplayResult, error) {
	res := ReplayResult{Replayed: []string{}, Missing: []string{}}
	if len(ids) == 0 {
		return res, fmt.Errorf("bus: replay dead letters: %w", message.ErrBadRequest.WithDetails("name the ids of the messages to replay (DeadLetters lists them)"))
	}
	want := make(map[string]bool, len(ids))
	var order []string
	for _, id := range ids {
		id, err := message.NormalizeUUID(id)
		if err != nil {
			return res, fmt.Errorf("bus: replay dead letters: %w", err)
		}
		if !want[id] {
			want[id] = true
			order = append(order, id)
		}
	}
	found := make(map[string]bool, len(want))
	err := b.scanDead(ctx, MaxDeadLetters, func(env *wire.Envelope, dl DeadLetter, ack func() error) error {
		if env == nil || !want[env.ID] {
			return nil
		}
		found[env.ID] = true
		if err := b.replayOne(ctx, env, route); err != nil {
			return fmt.Errorf("bus: replay dead letter %s (%s to %s): %w", env.ID, env.Type, dl.ServiceID, err)
		}
		if err := ack(); err != nil {
			b.log.Warn("replayed a dead letter but could not remove it from the dead-letter queue: it is there still, and may be replayed twice",
				"id", env.ID, "err", err)
		}
		res.Replayed = append(res.Replayed, env.ID)
		b.log.Info("replayed a dead letter", "id", env.ID, "type", env.Type, "service", env.ServiceID, "resource", env.ResourceUUID)
		return nil
	})
	for _, id := range order {
		if !found[id] {
			res.Missing = append(res.Missing, id)
		}
	}
	return res, err
}

// replayOne sends env, read from the dead-letter queue, again.
func (b *CloudBus) replayOne(ctx context.Context, env *wire.Envelope, route func(env *wire.Envelope) error) error {
	if env.Kind == wire.KindRequest {
		env.Kind, env.ReplyTo, env.CorrelationID = wire.KindSend, "", ""
	}
	if env.Kind != wire.KindSend {
		return message.ErrBadRequest.WithDetails(fmt.Sprintf("a %s cannot be replayed", env.Kind))
	}
	b.stampLeft(env, env.Timeout)
	if route != nil {
		if err := route(env); err != nil {
			return err
		}
	}
	data, err := wire.EncodeEnvelope(env, b.cfg.MaxMessageSize)
	if err != nil {
		return err
	}
	pctx, cancel := bound(ctx, busx.CallOptions{}, b.cfg.DefaultTimeout, true)
	defer cancel()
	return b.publishEncoded(pctx, env, data, false)
}

// scanDead reads up to max messages from the head of the dead-letter
// queue, handing each to visit in order, and gives back those visit left
// unacknowledged (ack removes one) when it ends: at visit's first error, at ctx's end, or when
// the messages counted at the start were read (or deadIdle passed with
// none, another reader holding the rest).
func (b *CloudBus) scanDead(ctx context.Context, max int, visit func(env *wire.Envelope, dl DeadLetter, ack func() error) error) error {
	q := b.cfg.DeadLetterQueue
	mc, ok := b.tr.(driver.MessageCounter)
	if !ok {
		return fmt.Errorf("bus: read the dead-letter queue %s: the transport cannot count a queue's messages (driver.MessageCounter): %w", q, errors.ErrUnsupported)
	}
	n, err := mc.Messages(ctx, q)
	if err != nil {
		return fmt.Errorf("bus: read the dead-letter queue %s: %w", q, err)
	}
	total := n
	n = min(n, max)
	if n == 0 {
		return nil
	}
	got := make(chan driver.Delivery, n)
	var received, settled atomic.Int64
	c, err := b.tr.Consume(ctx, q, driver.ConsumeOptions{Prefetch: n}, func(d driver.Delivery) {
		received.Add(1)
		select {
		case got <- d:
		default: // beyond the count (visit settled some): given back by Abort
		}
	})
	if err != nil {
		return fmt.Errorf("bus: read the dead-letter queue %s: %w", q, err)
	}
	defer func() {
		_ = c.Abort()
		// A quorum queue counts what Abort gave back some milliseconds
		// later: wait for it, so that the next read, from any process,
		// finds them.
		if received.Load() == settled.Load() {
			return
		}
		want := total - int(settled.Load())
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deadIdle/2)
		defer cancel()
		for {
			if m, err := mc.Messages(wctx, q); err != nil || m >= want || !sleepCtx(wctx, 10*time.Millisecond) {
				return
			}
		}
	}()
	idle := time.NewTimer(deadIdle)
	defer idle.Stop()
	for range n {
		var d driver.Delivery
		select {
		case d = <-got:
		case <-idle.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("bus: read the dead-letter queue %s: %w", q, ctxError(ctx))
		}
		idle.Reset(deadIdle)
		env, dl := b.deadLetterOf(d)
		if env != nil && isMarker(env) {
			continue
		}
		if err := visit(env, dl, func() error { settled.Add(1); return d.Ack() }); err != nil {
			return err
		}
	}
	return nil
}

// deadLetterOf decodes a delivery of the dead-letter queue; env is nil if
// it is not a message.
func (b *CloudBus) deadLetterOf(d driver.Delivery) (*wire.Envelope, DeadLetter) {
	dl := DeadLetter{Queue: d.Header(driver.HeaderDeadQueue), Reason: d.Header(driver.HeaderDeadReason)}
	env, err := wire.DecodeEnvelope(d.Body(), b.cfg.MaxMessageSize)
	if err != nil {
		dl.Err = err.Error()
		return nil, dl
	}
	dl.ID, dl.Kind, dl.Type, dl.ServiceID = env.ID, env.Kind.String(), env.Type, env.ServiceID
	dl.Resource, dl.Source, dl.Timeout, dl.Headers = env.ResourceUUID, env.Source, env.Timeout, env.Headers
	dl.Body = append(json.RawMessage(nil), env.Body...)
	return env, dl
}

// sleepCtx waits d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/message"
)

// Reroute goes round at most rerouteRounds times, rerouteRoundPause
// apart, before it gives up on a queue that does not become idle.
const (
	rerouteRounds     = 20
	rerouteRoundPause = 50 * time.Millisecond
	markerTTL         = 30 * time.Second // a marker outlives its drain by this at most
	markerWait        = 2 * time.Second  // a round waits this long for its marker
)

// ErrDropMessage, returned by a [CloudBus.Reroute] route function, drops
// the message: it is acknowledged and counted, not moved.
var ErrDropMessage = errors.New("bus: drop the message")

// RerouteStats counts what [CloudBus.Reroute] did with a queue's messages.
type RerouteStats struct {
	// Moved is the number of messages published where route said.
	Moved int
	// Late is the number of messages not moved because their sender's
	// deadline had passed: requests are dropped (their callers have their
	// timeout already), one-way messages go to the dead-letter queue.
	Late int
	// Dropped is the number of messages dropped because they could not
	// be decoded, or route said so (ErrDropMessage).
	Dropped int
}

// RerouteOption is an option of [CloudBus.Reroute].
type RerouteOption func(*rerouteOptions)

type rerouteOptions struct {
	keep bool
}

// KeepQueue makes [CloudBus.Reroute] move the messages present in the
// queue when it starts (those that arrive meanwhile too, up to its end
// marker) and leave the queue in place, instead of deleting it once
// idle. A node drains the queues of an evicted peer so, which may rejoin
// with the same queues: RabbitMQ confirms a message published to a queue
// that is deleted while the message is on its way, and drops it, so a
// queue that someone may still publish to must not be deleted.
func KeepQueue() RerouteOption { return func(o *rerouteOptions) { o.keep = true } }

// Reroute empties queue, a durable queue that nobody consumes any more
// (the service queue of a node that died, was evicted or left), and
// deletes it. It consumes the queue and hands each message's envelope to
// route, which sets env.ServiceID to where the message should go now
// (and may add headers); the message is published there, unchanged
// otherwise, and acknowledged: a request keeps its reply-to, so the new
// handler answers the original caller, and its id, so duplicates can be
// recognized. Messages whose deadline has passed are counted
// (RerouteStats.Late) and dropped, or for one-way messages moved to the
// dead-letter queue; undecodable ones and those route refuses with
// [ErrDropMessage] are dropped and counted. Any other error from route, or a
// failed publish, puts the message back and ends Reroute with that
// error: the queue stays for a later attempt.
//
// Reroute knows it has taken every message present when a marker it put
// at the tail of the queue comes back; it then deletes the queue if it is
// idle ([Transport.DeleteQueueIfIdle]: no message, no consumer), and
// otherwise goes round again for the messages that arrived meanwhile (at
// most 20 rounds, 50 ms apart: then it fails with an error matching
// message.ErrBusy). It returns when the queue
// is gone, or with ctx's error (the queue stays, with what was not moved).
// It may run on any bus of the cluster; the messages go through its
// transport.
func (b *CloudBus) Reroute(ctx context.Context, queue string, route func(env *message.Envelope) error, opts ...RerouteOption) (RerouteStats, error) {
	var ro rerouteOptions
	for _, o := range opts {
		o(&ro)
	}
	var (
		mu    sync.Mutex
		stats RerouteStats
	)
	count := func(f func(*RerouteStats)) {
		mu.Lock()
		f(&stats)
		mu.Unlock()
	}
	snapshot := func() RerouteStats {
		mu.Lock()
		defer mu.Unlock()
		return stats
	}
	for round := 1; ; round++ {
		if round > 1 {
			if round > rerouteRounds {
				return snapshot(), fmt.Errorf("bus: reroute %s: still not idle after %d rounds (messages keep coming, or it has a consumer): %w", queue, rerouteRounds, message.ErrBusy)
			}
			select {
			case <-time.After(rerouteRoundPause):
			case <-ctx.Done():
				return snapshot(), fmt.Errorf("bus: reroute %s: %w", queue, ctxError(ctx))
			}
		}
		token := message.NewUUID()
		back := make(chan struct{})
		stop := make(chan error, 1)
		var once sync.Once
		end := func(err error) {
			once.Do(func() {
				if err != nil {
					stop <- err
				}
				close(back)
			})
		}
		c, err := b.tr.Consume(ctx, queue, ConsumeOptions{Prefetch: b.cfg.Prefetch}, func(d Delivery) {
			select {
			case <-back: // ending: leave the rest for the next round
				giveBack(d)
				return
			default:
			}
			env, err := message.DecodeEnvelope(d.Body(), b.cfg.MaxMessageSize)
			if err != nil {
				count(func(s *RerouteStats) { s.Dropped++ })
				b.warnRefused("reroute: dropping an undecodable message", "queue", queue, "err", err)
				_ = d.Reject(false)
				return
			}
			now := time.Now()
			if tok := env.Headers[headerDrain]; isMarker(env) {
				switch {
				case tok == token && env.Source == b.node:
					_ = d.Ack() // ours: every message before it was taken
					end(nil)
				case markerUnbounded(env) || b.deadlineOf(env, now).late(now):
					_ = d.Ack() // a marker of a drain that ended long ago, or no bus's
				case env.Source == b.node && !b.drainPending(tok):
					// Left by one of this bus's earlier rounds, which
					// ended without it: giving it back would only bring
					// it back here, ahead of this round's marker.
					_ = d.Ack()
				default:
					giveBack(d) // another drainer's: let it come back to it
				}
				return
			}
			if dl := b.deadlineOf(env, now); dl.late(now) {
				count(func(s *RerouteStats) { s.Late++ })
				if env.Kind == message.KindSend { // kept, as every one-way message the bus could not run
					b.deadLetter(queue, env, d, Observation{Type: env.Type, ServiceID: env.ServiceID, ID: env.ID, Resource: env.ResourceUUID,
						Headers: env.Headers, Start: now, Deadline: dl.at, Err: message.ErrTimeout},
						fmt.Sprintf("its deadline passed %s before it could be moved out of %s", now.Sub(dl.at).Round(time.Millisecond), queue))
					return
				}
				_ = d.Ack()
				return
			}
			from := env.ServiceID
			switch err := route(env); {
			case errors.Is(err, ErrDropMessage):
				count(func(s *RerouteStats) { s.Dropped++ })
				_ = d.Ack()
				return
			case err != nil:
				giveBack(d)
				end(fmt.Errorf("bus: reroute %s: %w", queue, err))
				return
			}
			data, err := message.EncodeEnvelope(env, b.cfg.MaxMessageSize)
			if err == nil {
				pctx, cancel := context.WithTimeout(ctx, b.cfg.ReplyTimeout)
				err = b.tr.Publish(pctx, b.QueueName(env.ServiceID), data)
				cancel()
			}
			if err != nil {
				giveBack(d)
				end(fmt.Errorf("bus: reroute %s: move %s from %s to %s: %w", queue, env.ID, from, env.ServiceID, err))
				return
			}
			count(func(s *RerouteStats) { s.Moved++ })
			_ = d.Ack()
		})
		if err != nil {
			if errors.Is(err, message.ErrNoRoute) {
				return snapshot(), nil // the queue is gone already
			}
			return snapshot(), fmt.Errorf("bus: reroute %s: consume: %w", queue, err)
		}
		marker := &message.Envelope{
			ID: message.NewUUID(), Kind: message.KindSend, Type: message.TypeEmpty,
			ServiceID: "reroute", Source: b.node, Headers: map[string]string{headerDrain: token},
			Timeout: markerTTL, // another drainer of the queue gives it back until then
		}
		if b.cfg.Clock != nil {
			if now, bound, ok := b.cfg.Clock.ClusterTime(); ok {
				marker.Deadline = now.Add(markerTTL - bound).UnixNano()
			}
		}
		data, err := message.EncodeEnvelope(marker, b.cfg.MaxMessageSize)
		if err == nil {
			err = b.tr.Publish(ctx, queue, data)
		}
		if err != nil {
			_ = c.Cancel()
			return snapshot(), fmt.Errorf("bus: reroute %s: put the end marker: %w", queue, err)
		}
		select {
		case <-back:
		case <-ctx.Done():
		case <-time.After(markerWait):
			// The marker did not come back (another consumer kept it, or
			// it is still behind messages another consumer holds): end the
			// round, and the next one puts a new marker.
			end(nil)
		}
		_ = c.Cancel()
		select {
		case err := <-stop:
			return snapshot(), err
		default:
		}
		if ctx.Err() != nil {
			return snapshot(), fmt.Errorf("bus: reroute %s: %w", queue, ctxError(ctx))
		}
		if ro.keep {
			return snapshot(), nil
		}
		switch err := b.tr.DeleteQueueIfIdle(ctx, queue); {
		case err == nil:
			return snapshot(), nil
		case errors.Is(err, message.ErrBusy):
			continue // messages came in after the marker, or someone consumes it
		default:
			return snapshot(), fmt.Errorf("bus: reroute %s: delete: %w", queue, err)
		}
	}
}

// giveBack returns d to its queue without counting it as a failed
// delivery ([Delivery.Release]): Reroute never crashed on it.
func giveBack(d Delivery) {
	_ = d.Release()
}

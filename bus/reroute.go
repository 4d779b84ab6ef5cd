package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// Reroute rounds and drain markers (docs/design.md, "Delivery rules").
const (
	rerouteRounds     = 20
	rerouteRoundPause = 50 * time.Millisecond
	markerTTL         = 30 * time.Second // a marker outlives its drain by this at most
	markerWait        = 2 * time.Second  // a round waits this long for its marker
)

// reroute empties queue, which nobody consumes any more: route sets each
// envelope's ServiceID, and the message is moved there. Late messages are
// dropped (requests) or dead-lettered (one-way); undecodable ones and
// those route refuses with busx.ErrDrop are dropped; another error puts
// the message back and ends reroute. Once its tail marker came back,
// unless keep, it deletes the queue if idle, going round again at most
// rerouteRounds times (then message.ErrBusy).
func (b *CloudBus) reroute(ctx context.Context, queue string, route func(env *wire.Envelope) error, keep bool) (busx.RerouteStats, error) {
	var (
		mu    sync.Mutex
		stats busx.RerouteStats
	)
	count := func(f func(*busx.RerouteStats)) {
		mu.Lock()
		f(&stats)
		mu.Unlock()
	}
	snapshot := func() busx.RerouteStats {
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
		// held are the deliveries that arrive once this round is ending:
		// given back at once, they would come round to it again in a hot
		// loop until its consumer is cancelled; they go back after.
		var held []driver.Delivery
		hold := func(d driver.Delivery) {
			mu.Lock()
			held = append(held, d)
			mu.Unlock()
		}
		c, err := b.tr.Consume(ctx, queue, driver.ConsumeOptions{Prefetch: b.cfg.Prefetch}, func(d driver.Delivery) {
			select {
			case <-back: // ending: leave the rest for the next round
				hold(d)
				return
			default:
			}
			env, err := wire.DecodeEnvelope(d.Body(), b.cfg.MaxMessageSize)
			if err != nil {
				count(func(s *busx.RerouteStats) { s.Dropped++ })
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
					_ = d.Ack() // an earlier round's
				default:
					// Another drainer's: let it come back to that
					// drainer, but not at once: given straight back, it
					// would come back here in a hot loop while this round
					// waits for its own marker (lost, say, if this node's
					// traffic is).
					select {
					case <-time.After(rerouteRoundPause):
						giveBack(d)
					case <-back:
						hold(d)
					case <-ctx.Done():
						hold(d)
					}
				}
				return
			}
			if dl := b.deadlineOf(env, now); dl.late(now) {
				count(func(s *busx.RerouteStats) { s.Late++ })
				if env.Kind == wire.KindSend { // kept, as every one-way message the bus could not run
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
			case errors.Is(err, busx.ErrDrop):
				count(func(s *busx.RerouteStats) { s.Dropped++ })
				_ = d.Ack()
				return
			case err != nil:
				giveBack(d)
				end(fmt.Errorf("bus: reroute %s: %w", queue, err))
				return
			}
			data, err := wire.EncodeEnvelope(env, b.cfg.MaxMessageSize)
			if err == nil {
				pctx, cancel := context.WithTimeout(ctx, b.cfg.ReplyTimeout)
				err = b.tr.Publish(pctx, b.queueName(env.ServiceID), data)
				cancel()
			}
			if err != nil {
				giveBack(d)
				end(fmt.Errorf("bus: reroute %s: move %s from %s to %s: %w", queue, env.ID, from, env.ServiceID, err))
				return
			}
			count(func(s *busx.RerouteStats) { s.Moved++ })
			_ = d.Ack()
		})
		if err != nil {
			if errors.Is(err, message.ErrNoRoute) {
				return snapshot(), nil // the queue is gone already
			}
			return snapshot(), fmt.Errorf("bus: reroute %s: consume: %w", queue, err)
		}
		marker := &wire.Envelope{
			ID: message.NewUUID(), Kind: wire.KindSend, Type: message.TypeEmpty,
			ServiceID: "reroute", Source: b.node, Headers: map[string]string{headerDrain: token},
			Timeout: markerTTL, // another drainer of the queue gives it back until then
		}
		if b.cfg.Clock != nil {
			if now, bound, ok := b.cfg.Clock.ClusterTime(); ok {
				marker.Deadline = now.Add(markerTTL - bound).UnixNano()
			}
		}
		data, err := wire.EncodeEnvelope(marker, b.cfg.MaxMessageSize)
		if err == nil {
			err = b.tr.Publish(ctx, queue, data)
		}
		giveHeldBack := func() {
			_ = c.Cancel()
			mu.Lock()
			for _, d := range held {
				giveBack(d)
			}
			held = nil
			mu.Unlock()
		}
		if err != nil {
			end(nil)
			giveHeldBack()
			return snapshot(), fmt.Errorf("bus: reroute %s: put the end marker: %w", queue, err)
		}
		select {
		case <-back:
		case <-ctx.Done():
		case <-time.After(markerWait): // the next round puts a new marker
		}
		end(nil)
		giveHeldBack()
		select {
		case err := <-stop:
			return snapshot(), err
		default:
		}
		if ctx.Err() != nil {
			return snapshot(), fmt.Errorf("bus: reroute %s: %w", queue, ctxError(ctx))
		}
		if keep {
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

// giveBack returns d to its queue without counting a failed delivery.
func giveBack(d driver.Delivery) {
	_ = d.Release()
}

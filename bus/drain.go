package bus

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// headerDrain marks the drain marker a bus sends itself (see Drain).
const headerDrain = "cloudbus-drain"

// isMarker reports whether env is a drain marker: a one-way message of
// the empty type with the drain header. A marker does nothing when
// taken; it only tells its drainer that the messages before it were.
func isMarker(env *wire.Envelope) bool {
	return env.Headers[headerDrain] != "" && env.Kind == wire.KindSend && env.Type == message.TypeEmpty
}

// markerUnbounded reports whether a marker has no deadline, or one
// further than markerTTL: no bus sends such a marker (each lives at most
// markerTTL), and giving one back to its queue until it expires would
// keep it circling between the broker and the consumers for good.
func markerUnbounded(env *wire.Envelope) bool {
	return env.Timeout <= 0 && env.Deadline <= 0 || env.Timeout > markerTTL
}

// maxMarkersSeen bounds the markers a bus remembers giving back.
const maxMarkersSeen = 4096

// markerExpired reports whether this bus has been giving the marker id
// back for longer than markerTTL: a marker whose deadline restarts at
// every delivery (one with a timeout and no cluster-time deadline) would
// otherwise circle for good. It remembers at most maxMarkersSeen markers,
// forgetting the expired ones first; past that, every new one expires.
func (b *CloudBus) markerExpired(id string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	first, ok := b.markersSeen[id]
	if ok {
		if now.Sub(first) > markerTTL {
			delete(b.markersSeen, id)
			return true
		}
		return false
	}
	if len(b.markersSeen) >= maxMarkersSeen {
		for k, t := range b.markersSeen {
			if now.Sub(t) > markerTTL {
				delete(b.markersSeen, k)
			}
		}
		if len(b.markersSeen) >= maxMarkersSeen {
			return true
		}
	}
	if b.markersSeen == nil {
		b.markersSeen = make(map[string]time.Time)
	}
	b.markersSeen[id] = now
	return false
}

// refuseReservedHeader returns an error if env carries the drain header
// without being a marker: the header is the bus's own.
func refuseReservedHeader(env *wire.Envelope) error {
	if env.Headers[headerDrain] != "" && !isMarker(env) {
		return message.ErrBadRequest.WithDetails("header " + headerDrain + " is reserved for the bus's drain markers")
	}
	return nil
}

// drainWaiters maps a marker token to the channel closed when the
// marker comes back; guarded by CloudBus.mu.
type drainWaiters map[string]chan struct{}

// drain stops this bus's own (per-node) service queues cleanly: it puts a
// marker at the tail of each queue, keeps consuming until every marker
// came back (so every message sent before the call was taken), then
// stops those consumers and waits until their handlers finished, or ctx
// ends. Shared queues (api.portal) simply stop being consumed: their
// other consumers carry on. Replies and events keep flowing, and the bus
// stays open for calls; the queues stay too (delete them with
// Unregister). A node leaving the cluster drains after it left every
// ring, so that nothing sent to it is lost.
func (b *CloudBus) drain(ctx context.Context) error {
	b.mu.Lock()
	var own []*service
	for _, s := range b.services {
		if _, node, ok := SplitServiceID(s.id); ok && node == b.node && s.consumer != nil {
			own = append(own, s)
		}
	}
	if b.drains == nil {
		b.drains = make(drainWaiters)
	}
	waits := make([]chan struct{}, len(own))
	tokens := make([]string, len(own))
	for i := range own {
		tokens[i] = message.NewUUID()
		waits[i] = make(chan struct{})
		b.drains[tokens[i]] = waits[i]
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		for _, tok := range tokens {
			delete(b.drains, tok)
		}
		b.mu.Unlock()
	}()

	var wg sync.WaitGroup
	errs := make([]error, len(own))
	for i, s := range own {
		wg.Go(func() {
			env := &wire.Envelope{
				ID: message.NewUUID(), Kind: wire.KindSend, Type: message.TypeEmpty,
				ServiceID: s.id, Source: b.node, Headers: map[string]string{headerDrain: tokens[i]},
				Timeout: markerTTL, // another bus that meets it gives it back until then
			}
			if err := b.publish(ctx, env); err != nil {
				errs[i] = fmt.Errorf("bus: drain %s: %w", s.id, err)
				return
			}
			select {
			case <-waits[i]:
			case <-ctx.Done():
				errs[i] = fmt.Errorf("bus: drain %s: marker did not come back: %w", s.id, ctxError(ctx))
			}
		})
	}
	wg.Wait()
	b.stopConsumers(false, false)
	if err := b.drainHandlers(ctx); err != nil {
		return fmt.Errorf("bus: drain: handlers still running: %w", ctxError(ctx))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// drainPending reports whether tok is the marker of a drain of this bus
// still waiting for it.
func (b *CloudBus) drainPending(tok string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.drains[tok]
	return ok
}

// takeDrainMarker reports whether env is this bus's drain marker, and if
// so signals its waiter.
func (b *CloudBus) takeDrainMarker(env *wire.Envelope) bool {
	tok := env.Headers[headerDrain]
	if !isMarker(env) || env.Source != b.node {
		return false
	}
	b.mu.Lock()
	if c, ok := b.drains[tok]; ok {
		close(c)
		delete(b.drains, tok)
	}
	b.mu.Unlock()
	return true
}

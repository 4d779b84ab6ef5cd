package bus

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// headerDrain marks a drain marker, a message a bus sends itself.
const headerDrain = "cloudbus-drain"

// isMarker reports a drain marker: a one-way empty message with the header.
func isMarker(env *wire.Envelope) bool {
	return env.Headers[headerDrain] != "" && env.Kind == wire.KindSend && env.Type == message.TypeEmpty
}

// markerUnbounded reports a marker with no deadline or one past
// markerTTL, which no bus sends.
func markerUnbounded(env *wire.Envelope) bool {
	return env.Timeout <= 0 && env.Deadline <= 0 || env.Timeout > markerTTL
}

// maxMarkersSeen bounds the markers a bus remembers giving back.
const maxMarkersSeen = 4096

// markerExpired reports whether this bus has been giving marker id back
// for longer than markerTTL; past maxMarkersSeen, every new one has.
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

// refuseReservedHeader refuses the drain header on anything but a marker.
func refuseReservedHeader(env *wire.Envelope) error {
	if env.Headers[headerDrain] != "" && !isMarker(env) {
		return message.ErrBadRequest.WithDetails("header " + headerDrain + " is reserved for the bus's drain markers")
	}
	return nil
}

// drainWaiters maps a marker's token to its waiter; under CloudBus.mu.
type drainWaiters map[string]chan struct{}

// drain puts a marker at the tail of each of this node's own service
// queues, consumes until every marker came back, then stops those
// consumers and waits for their handlers, or ctx. Shared queues just stop
// being consumed; queues stay, and the bus stays open.
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
	b.stopConsumers(ctx, false, false)
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

// drainPending reports whether a drain of this bus waits for tok.
func (b *CloudBus) drainPending(tok string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.drains[tok]
	return ok
}

// takeDrainMarker reports whether env is this bus's marker, and if so
// wakes its drain.
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

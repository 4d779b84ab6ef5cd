package bus

import (
	"context"
	"fmt"
	"sync"

	"github.com/cloudbus-go/cloudbus/message"
)

// headerDrain marks the drain marker a bus sends itself (see Drain).
const headerDrain = "cloudbus-drain"

// drainWaiters maps a marker token to the channel closed when the
// marker comes back; guarded by CloudBus.mu.
type drainWaiters map[string]chan struct{}

// Drain stops this bus's own (per-node) service queues cleanly: it puts a
// marker at the tail of each queue, keeps consuming until every marker
// came back (so every message sent before the call was taken), then
// stops those consumers and waits until their handlers finished, or ctx
// ends. Shared queues (api.portal) simply stop being consumed: their
// other consumers carry on. Replies and events keep flowing, and the bus
// stays open for calls; the queues stay too (delete them with
// Unregister). A node leaving the cluster drains after it left every
// ring, so that nothing sent to it is lost.
func (b *CloudBus) Drain(ctx context.Context) error {
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
			env := &message.Envelope{
				ID: message.NewUUID(), Kind: message.KindSend, Type: message.TypeEmpty,
				ServiceID: s.id, Source: b.node, Headers: map[string]string{headerDrain: tokens[i]},
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
	b.stopConsumers(false)
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
func (b *CloudBus) takeDrainMarker(env *message.Envelope) bool {
	tok, ok := env.Headers[headerDrain]
	if !ok || env.Source != b.node {
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

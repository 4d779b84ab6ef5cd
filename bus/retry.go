package bus

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// endsOneWay reports whether err ends a one-way message (rule 1).
func endsOneWay(err error) bool {
	if err == nil {
		return false
	}
	switch message.AsError(err).Retry() { // a received error's own class, for a code this node does not know
	case message.RetryNever, message.RetryRan:
		return true
	}
	return false
}

// retryPause returns the pause after failed attempt n (from 1).
func (b *CloudBus) retryPause(n int) time.Duration {
	p := b.cfg.RetryBackoff
	for i := 1; i < n && p < b.cfg.RetryBackoffMax; i++ {
		p *= 2
	}
	return min(p, b.cfg.RetryBackoffMax)
}

// attemptsOf returns the failed attempts before d, never negative.
func attemptsOf(d driver.Delivery) int {
	n, err := strconv.Atoi(d.Header(driver.HeaderAttempts))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// failOneWay settles a failed one-way message by the rules of "One-way
// messages"; start is when its handler started, zero if none ran.
func (b *CloudBus) failOneWay(serviceID string, env *wire.Envelope, d driver.Delivery, dl deadline, start time.Time, err error) {
	obs := Observation{Type: env.Type, ServiceID: serviceID, ID: env.ID, Resource: env.ResourceUUID, Headers: env.Headers,
		Start: start, Deadline: dl.at, Err: err}
	if start.IsZero() {
		obs.Start = time.Now()
	}
	if endsOneWay(err) {
		b.failed.Add(1)
		b.warnRefused("one-way message ended: its error says the message is wrong; it is not tried again",
			"service", serviceID, "type", env.Type, "id", env.ID, "resource", env.ResourceUUID, "err", err)
		_ = d.Ack()
		return
	}
	attempts := attemptsOf(d) + 1
	pause := b.retryPause(attempts)
	now := time.Now()
	var why string
	switch {
	case attempts >= b.cfg.RetryAttempts:
		why = fmt.Sprintf("it failed %d times (Config.RetryAttempts %d)", attempts, b.cfg.RetryAttempts)
	case !dl.at.IsZero() && !now.Add(pause).Before(dl.at):
		why = fmt.Sprintf("it failed %d times and its deadline passes in %s, before the next attempt (in %s)",
			attempts, max(dl.at.Sub(now), 0).Round(time.Millisecond), pause)
	}
	if why != "" {
		b.deadLetter(serviceID, env, d, obs, why+"; last error: "+message.AsError(err).Error())
		return
	}
	b.retried.Add(1)
	obs.Op = OpRetry
	b.observe(obs)
	b.log.Debug("one-way message failed; trying it again after a pause", "service", serviceID, "type", env.Type, "id", env.ID,
		"attempt", attempts, "pause", pause, "err", err)
	b.hold(pause, func() {
		if rerr := d.Retry(attempts); rerr != nil {
			b.log.Warn("could not give a one-way message back for another attempt; the broker redelivers it", "service", serviceID, "id", env.ID, "err", rerr)
		}
	})
}

// deadLetter moves a one-way message to the dead-letter queue.
func (b *CloudBus) deadLetter(serviceID string, env *wire.Envelope, d driver.Delivery, obs Observation, why string) {
	b.deadLettered.Add(1)
	obs.Op = OpDeadLetter
	b.observe(obs)
	b.warnRefused("one-way message moved to the dead-letter queue", "service", serviceID, "type", env.Type, "id", env.ID,
		"resource", env.ResourceUUID, "dead_letter", b.cfg.DeadLetterQueue, "why", why)
	if err := d.DeadLetter(b.cfg.DeadLetterQueue, why); err != nil {
		b.log.Error("could not move a one-way message to the dead-letter queue; it goes back to its queue", "service", serviceID, "id", env.ID, "err", err)
	}
}

// held is a delivery held before it is given back.
type held struct {
	t    *time.Timer
	give func()
}

// hold runs give after pause, or at once once the bus is closing.
func (b *CloudBus) hold(pause time.Duration, give func()) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		give()
		return
	}
	h := &held{give: give}
	if b.held == nil {
		b.held = make(map[*held]struct{})
	}
	b.held[h] = struct{}{}
	b.holding.Add(1)
	h.t = time.AfterFunc(pause, func() { b.unhold(h) })
	b.mu.Unlock()
}

// unhold gives h back, once.
func (b *CloudBus) unhold(h *held) {
	b.mu.Lock()
	_, ok := b.held[h]
	delete(b.held, h)
	b.mu.Unlock()
	if ok {
		defer b.holding.Done()
		h.give()
	}
}

// releaseHeld gives back every held delivery, all at once, and waits
// until they are given back or ctx ends; Close calls it while the
// consumers can still settle them, and waits for the rest (b.holding)
// once it aborted the consumers, which ends a give-back still waiting
// for a broker that does not answer.
func (b *CloudBus) releaseHeld(ctx context.Context) {
	b.mu.Lock()
	hs := make([]*held, 0, len(b.held))
	for h := range b.held {
		hs = append(hs, h)
	}
	b.mu.Unlock()
	given := make(chan struct{}, len(hs))
	for _, h := range hs {
		go func() {
			defer func() { given <- struct{}{} }()
			if h.t.Stop() {
				b.unhold(h)
			}
		}()
	}
	for range hs {
		select {
		case <-given:
		case <-ctx.Done():
			return
		}
	}
}

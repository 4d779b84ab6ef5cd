package bus

import (
	"context"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/bus/driver"
)

// How api.portal's consumers grow (see spill).
const (
	// portalConsumers bounds the consumers a bus keeps on api.portal,
	// each with Config.Prefetch deliveries.
	portalConsumers = 8
)

// spillCooldown is how long after a consumer was added or removed the
// bus waits before it removes one; a variable for the tests.
var spillCooldown = time.Second

// spill adds consumers to a queue whose handlers mostly wait for other
// services, and removes them again: api.portal's. Each portal handler
// holds its delivery, unacknowledged, until the owner it forwarded the
// message to answers, so that another portal runs it again if this
// process dies. With one consumer, Config.Prefetch calls waiting for an
// owner that died, froze or slowed down would fill the prefetch, and
// every API call, whatever node owns its resource, would wait in
// api.portal until those ended (by the owner's eviction or their
// deadlines). So while the handlers running (each waiting for an owner)
// fill three quarters of what its consumers may hold, the bus opens one
// more consumer, up to portalConsumers; once they would fill at most half
// of the consumers without the last one added, and spillCooldown has
// passed, it cancels that one (its deliveries still run and settle).
// Messages waiting in a resource's line behind the one running do not
// count: more consumers would only move more of them from api.portal,
// where any portal may take them, into this node's lines. A paused or
// cut-off process keeps what it held, and at most Config.Prefetch more
// per consumer it had then: as many as a single consumer when it paused
// in a calm moment.
type spill struct {
	b        *CloudBus
	s        *service
	prefetch int
	max      int // consumers, the first one included

	mu      sync.Mutex
	running int                // handlers running
	extra   []driver.Consumer  // added consumers, oldest first
	busy    bool               // a grow runs
	halt    context.CancelFunc // ends the grow's Consume; set while it runs
	changed time.Time          // the last grow or shrink
	stopped bool               // the service's consumers were stopped
	abort   bool               // how: Abort, not Cancel
}

func newSpill(b *CloudBus, s *service, prefetch, max int) *spill {
	return &spill{b: b, s: s, prefetch: prefetch, max: max}
}

// capacity is what the consumers may hold; under mu.
func (p *spill) capacity() int { return (1 + len(p.extra)) * p.prefetch }

// started counts a handler that starts, and opens another consumer if
// the running ones fill three quarters of the capacity.
func (p *spill) started() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running++
	if p.stopped || p.busy || 1+len(p.extra) >= p.max || 4*p.running < 3*p.capacity() {
		return
	}
	p.busy = true
	p.b.growers.Add(1)
	go p.grow()
}

// finished counts a handler that ended, and cancels the last consumer
// added if the running ones would fill at most half of the rest.
func (p *spill) finished() {
	p.mu.Lock()
	p.running--
	var c driver.Consumer
	if !p.stopped && len(p.extra) > 0 && 2*p.running <= p.capacity()-p.prefetch && time.Since(p.changed) >= spillCooldown {
		c = p.extra[len(p.extra)-1]
		p.extra = p.extra[:len(p.extra)-1]
		p.changed = time.Now()
	}
	if c != nil {
		p.b.growers.Add(1) // before stop, which Close's wait follows
	}
	n := 1 + len(p.extra)
	p.mu.Unlock()
	if c == nil {
		return
	}
	p.b.log.Debug("fewer consumers on a queue whose handlers wait less", "service", p.s.id, "consumers", n)
	// Cancel waits for the broker's answer: not on a handler's worker.
	go func() {
		defer p.b.growers.Done()
		if err := c.Cancel(); err != nil && !isGone(err) {
			p.b.log.Warn("cancel an added consumer", "service", p.s.id, "err", err)
		}
	}()
}

// grow opens one more consumer.
func (p *spill) grow() {
	defer p.b.growers.Done()
	ctx, cancel := context.WithTimeout(p.b.base, p.b.cfg.ReplyTimeout)
	p.mu.Lock()
	if p.stopped { // Close or Unregister came first
		p.busy = false
		p.mu.Unlock()
		cancel()
		return
	}
	p.halt = cancel // stop ends the wait for a broker that does not answer
	p.mu.Unlock()
	c, err := p.b.tr.Consume(ctx, p.s.queue, driver.ConsumeOptions{Prefetch: p.prefetch}, func(d driver.Delivery) { p.b.onDelivery(p.s, d) })
	cancel()
	p.mu.Lock()
	p.busy, p.halt = false, nil
	if err != nil {
		stopped := p.stopped
		p.mu.Unlock()
		if !stopped && !isGone(err) && p.b.base.Err() == nil {
			p.b.log.Warn("could not add a consumer to a queue whose handlers wait", "service", p.s.id, "err", err)
		}
		return
	}
	if p.stopped {
		abort := p.abort
		p.mu.Unlock()
		stop := c.Cancel
		if abort {
			stop = c.Abort
		}
		_ = stop()
		return
	}
	p.extra = append(p.extra, c)
	p.changed = time.Now()
	n := 1 + len(p.extra)
	again := n < p.max && 4*p.running >= 3*p.capacity()
	if again {
		p.busy = true
		p.b.growers.Add(1)
	}
	p.mu.Unlock()
	p.b.log.Debug("one more consumer on a queue whose handlers wait", "service", p.s.id, "consumers", n)
	if again {
		go p.grow()
	}
}

// stop returns the added consumers, for the caller to stop as it stops
// the first one (Abort if abort); a grow still running stops its own.
func (p *spill) stop(abort bool) []driver.Consumer {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped, p.abort = true, abort
	if p.halt != nil {
		p.halt() // Close waits for the grow: it must not wait on the broker
	}
	cs := p.extra
	p.extra = nil
	return cs
}

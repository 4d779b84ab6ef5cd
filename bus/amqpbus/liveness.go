package amqpbus

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cloudbus-go/cloudbus/message"
)

// pauseThreshold is the gap between two ticks of the watchdog that
// counts as a pause of the process: after one, deliveries read before
// the pause, or read from the socket's buffer right after it, pass Check
// only once the broker answered a round trip sent after the pause.
const pauseThreshold = 500 * time.Millisecond

// watchdogTick is the watchdog's period.
const watchdogTick = 100 * time.Millisecond

// mono returns the time since the transport was created, on the
// monotonic clock, in nanoseconds.
func (t *Transport) mono() int64 { return int64(time.Since(t.born)) }

// watchdog notices pauses of this process: a tick that comes much later
// than due means nothing ran meanwhile. It records when the pause ended
// and asks the current session for a probe at once.
func (t *Transport) watchdog() {
	defer t.wg.Done()
	tick := time.NewTicker(watchdogTick)
	defer tick.Stop()
	last := t.mono()
	for {
		select {
		case <-t.closing:
			return
		case <-tick.C:
		}
		now := t.mono()
		if gap := time.Duration(now - last); gap > pauseThreshold {
			t.pauseEnd.Store(now)
			t.log.Warn("this process was paused; deliveries read before the pause wait for the broker to answer a round trip",
				"paused_for", gap.Round(time.Millisecond))
			t.mu.Lock()
			s := t.sess
			t.mu.Unlock()
			if s != nil {
				s.askProbe()
			}
		}
		last = now
		t.lastTick.Store(now)
	}
}

// mustProveAfter returns the monotonic time after which a successful
// probe must have been sent for a delivery to be run: the end of the
// last pause; or now, if the watchdog has not ticked for longer than a
// pause (this goroutine may be the first to run after one).
func (t *Transport) mustProveAfter() int64 {
	now := t.mono()
	if now-t.lastTick.Load() > int64(pauseThreshold) {
		return now
	}
	return t.pauseEnd.Load()
}

// probed wakes everyone waiting for a probe's outcome.
func (t *Transport) probed() {
	t.probeMu.Lock()
	close(t.probeWake)
	t.probeWake = make(chan struct{})
	t.probeMu.Unlock()
}

func (t *Transport) probeWaiter() <-chan struct{} {
	t.probeMu.Lock()
	defer t.probeMu.Unlock()
	return t.probeWake
}

// Check implements [driver.Delivery]: the delivery is still held if its
// channel is open (an aborted consumer's is not) and, when the process
// may have been paused since, the broker answered a round trip sent
// after the pause.
func (d *delivery) Check(ctx context.Context) error {
	t, s := d.c.t, d.s
	for {
		if s.isLost() {
			return fmt.Errorf("amqpbus: delivery from %s: its connection closed, so the broker requeued it: %w", d.c.queue, message.ErrUnavailable)
		}
		if d.d.Acknowledger.(*amqp.Channel).IsClosed() {
			return fmt.Errorf("amqpbus: delivery from %s: its channel closed, so the broker requeued it: %w", d.c.queue, message.ErrUnavailable)
		}
		if s.proved.Load() >= t.mustProveAfter() {
			return nil
		}
		wake := t.probeWaiter()
		s.askProbe()
		select {
		case <-wake:
		case <-s.lost:
		case <-t.closing:
			return fmt.Errorf("amqpbus: delivery from %s: %w", d.c.queue, message.ErrClosed)
		case <-ctx.Done():
			return fmt.Errorf("amqpbus: delivery from %s: no answer from the broker since this process was paused: %w", d.c.queue, ctxErr(ctx))
		}
	}
}

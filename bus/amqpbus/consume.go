package amqpbus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/message"
)

// headerDeliveries counts the deliveries of a message that came back
// unacknowledged, on a queue with QueueOptions.MaxDeliveries.
const headerDeliveries = "x-cloudbus-deliveries"

var consumerTags atomic.Uint64

// testHookConsumeOpened, when set by a test, runs in Consume between the
// consumer's opening and its registration.
var testHookConsumeOpened func()

// feed is the deliveries of one channel, and the session it belongs to.
type feed struct {
	d <-chan amqp.Delivery
	s *session
}

// consumer consumes one queue on its own channel. When the connection
// drops, the transport resumes it on a new channel of the next session;
// deliveries of the old channel can no longer be acknowledged (the broker
// requeued them), and their tags are never used on the new channel.
type consumer struct {
	t        *Transport
	queue    string
	prefetch int
	tag      string
	limit    driver.QueueOptions
	handle   func(driver.Delivery)
	done     chan struct{} // closed when run returns
	resumed  chan feed
	stopped  chan struct{}
	stopOnce sync.Once
	// aborted is closed by Abort: the channel goes, the broker takes
	// back what it handed over, and a republish still waiting for the
	// broker (Release, Retry, DeadLetter) gives up.
	aborted   chan struct{}
	abortOnce sync.Once

	// resumeMu serializes resumes, so that a feed of an older session
	// never replaces a newer one's; on is the session the consumer is
	// open on, so that a session resumes it once.
	resumeMu sync.Mutex
	on       *session

	// frames orders the frames this consumer sends on its channels
	// (acknowledgements, rejections) with the channels' closing: once a
	// channel is closing, nothing more is sent on it. A frame sent after
	// the client's channel.close reaches the broker on a channel it has
	// closed, and RabbitMQ answers that with a connection error (504
	// CHANNEL_ERROR, expected 'channel.open'), which costs every channel
	// of the connection.
	frames  sync.RWMutex
	closing map[*amqp.Channel]bool

	mu          sync.Mutex
	ch          *amqp.Channel // current channel
	outstanding map[*amqp.Channel]int
	cancelled   bool // Cancel was called
	cancelDone  bool // the broker confirmed basic.cancel on ch
}

// Consume implements [driver.Transport]: a channel per consumer with
// basic.qos prefetch and manual acknowledgements.
func (t *Transport) Consume(ctx context.Context, queue string, opts driver.ConsumeOptions, handle func(driver.Delivery)) (driver.Consumer, error) {
	op := "consume " + queue
	if handle == nil {
		return nil, fmt.Errorf("amqpbus: %s: nil handler: %w", op, message.ErrBadRequest)
	}
	s, err := t.current(op)
	if err != nil {
		return nil, err
	}
	c := &consumer{
		t:           t,
		queue:       queue,
		prefetch:    max(opts.Prefetch, 1),
		tag:         fmt.Sprintf("%s-%d", t.cfg.ConnectionName, consumerTags.Add(1)),
		handle:      handle,
		done:        make(chan struct{}),
		resumed:     make(chan feed, 1),
		stopped:     make(chan struct{}),
		aborted:     make(chan struct{}),
		outstanding: make(map[*amqp.Channel]int),
	}
	t.mu.Lock()
	c.limit = t.queues[queue]
	t.mu.Unlock()
	// amqp091's channel.open, basic.qos and basic.consume ignore ctx: a
	// broker node that froze, or a quorum queue without a leader, would
	// hold the caller past its deadline. They run on their own; a consumer
	// given up on is aborted, by open itself if it has not finished.
	type opened struct {
		d   <-chan amqp.Delivery
		err error
	}
	res := make(chan opened, 1)
	go func() {
		d, err := c.open(s)
		res <- opened{d, err}
	}()
	var r opened
	select {
	case r = <-res:
	case <-ctx.Done():
		r.err = ctxErr(ctx)
	case <-s.lost:
		r.err = fmt.Errorf("connection lost (%v): %w", s.err, message.ErrUnavailable)
	}
	if r.err != nil {
		t.spawn(c.abort) // channel.close waits for the broker: never on the caller's goroutine
		return nil, t.opError(s, op, r.err)
	}
	if f := testHookConsumeOpened; f != nil {
		f()
	}
	c.on = s
	t.mu.Lock()
	t.consumers[c] = struct{}{}
	cur := t.sess
	t.mu.Unlock()
	go c.run(feed{d: r.d, s: s})
	if cur != nil && cur != s {
		// s was lost and a reconnect resumed the consumers before this
		// one counted among them: its channel died with s, and nothing
		// else would open it on the new connection. (A reconnect still
		// under way, cur nil, resumes it with the others.)
		t.spawn(func() { t.resumeConsumer(c, cur) })
	}
	return c, nil
}

// open starts consuming on a new channel of s.
func (c *consumer) open(s *session) (<-chan amqp.Delivery, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Qos(c.prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	// Not ConsumeWithContext: it cancels the consumer when its ctx ends.
	deliveries, err := ch.Consume(c.t.Address(c.queue), c.tag, false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, err
	}
	c.mu.Lock()
	if c.cancelled {
		// stop ran while this channel opened (a resume after a reconnect
		// racing a Cancel): it could not cancel a consumer that did not
		// exist yet, and nobody reads these deliveries. Close the
		// channel, so that the broker takes back what it handed over,
		// instead of leaving a consumer that holds up to prefetch
		// messages unacknowledged for good.
		c.mu.Unlock()
		_ = ch.Close()
		return nil, errStopped
	}
	c.ch = ch
	c.mu.Unlock()
	return deliveries, nil
}

// errStopped is open's error for a consumer stopped meanwhile.
var errStopped = errors.New("amqpbus: consumer stopped while its channel opened")

// resume restarts the consumer on session s after a reconnect, or after
// the broker cancelled it on s. It does nothing if the consumer is open
// on s already, or if s is no longer the transport's session (the
// newer session resumes it).
func (c *consumer) resume(s *session) error {
	c.resumeMu.Lock()
	defer c.resumeMu.Unlock()
	c.mu.Lock()
	cancelled := c.cancelled
	c.mu.Unlock()
	c.t.mu.Lock()
	current := c.t.sess == s
	c.t.mu.Unlock()
	if cancelled || c.on == s || !current {
		return nil
	}
	deliveries, err := c.open(s)
	if errors.Is(err, errStopped) {
		return nil
	}
	if err != nil {
		return err
	}
	c.on = s
	f := feed{d: deliveries, s: s}
	select {
	case c.resumed <- f:
	default: // a resume is already queued: keep the newer
		select {
		case <-c.resumed:
		default:
		}
		c.resumed <- f
	}
	return nil
}

func (c *consumer) run(f feed) {
	defer close(c.done)
	for {
		for d := range f.d {
			recount := d.Redelivered && c.limit.MaxDeliveries > 0
			c.mu.Lock()
			cancelled := c.cancelled
			if !cancelled {
				// Counted in the same step as the check: stop sees it
				// outstanding and keeps the channel open for its
				// settlement (a recount's too: it settles the original
				// once its counted copy is published).
				c.outstanding[d.Acknowledger.(*amqp.Channel)]++
			}
			c.mu.Unlock()
			switch {
			case cancelled:
				// Not handed over: given back to the queue at once
				// (kept unacknowledged until the channel closed, it
				// would be invisible to a drain that deletes the queue
				// once it looks empty).
				_ = c.send(d.Acknowledger, func() error { return d.Nack(false, true) })
			case recount:
				c.recount(d)
			default:
				c.handle(&delivery{c: c, s: f.s, d: d})
			}
		}
		if !f.s.isLost() {
			c.mu.Lock()
			cancelled := c.cancelled
			c.mu.Unlock()
			if !cancelled {
				// The broker cancelled the consumer on a live connection
				// (its queue was deleted, or its broker node went down):
				// consume again once the queue is back.
				c.t.log.Warn("the broker cancelled a consumer; consuming again", "queue", c.queue)
				c.resumeMu.Lock()
				if c.on == f.s {
					c.on = nil // no longer open on f.s: reconsume opens it again
				}
				c.resumeMu.Unlock()
				on := f.s
				c.t.spawn(func() { c.reconsume(on) })
			}
		}
		select { // the channel closed: stopped, or the connection dropped
		case f = <-c.resumed:
		case <-c.stopped:
			return
		case <-c.t.closing:
			return
		}
	}
}

// reconsume consumes again on s after the broker cancelled the consumer,
// or its resume after a reconnect failed, while the connection stayed
// up: the queue is declared again if this transport declared it, with
// backoff from 100 ms to ReconnectMax, until it succeeds, the consumer
// stops or the session ends (a new session resumes every consumer).
func (c *consumer) reconsume(s *session) {
	delay := 100 * time.Millisecond
	for {
		select {
		case <-time.After(jitter(delay)):
		case <-c.stopped:
			return
		case <-s.lost:
			return
		case <-c.t.closing:
			return
		}
		c.t.mu.Lock()
		opts, declared := c.t.queues[c.queue]
		c.t.mu.Unlock()
		ctx, cancel := context.WithTimeout(c.t.life, c.t.cfg.DialTimeout)
		var err error
		if declared {
			onBroker := c.t.Address(c.queue)
			err = s.control(ctx, func(ch *amqp.Channel) error { return c.t.declareOn(ch, onBroker, opts) })
		}
		cancel()
		if err == nil {
			err = c.resume(s)
		}
		if err == nil {
			return
		}
		c.t.log.Info("consuming again failed; retrying", "queue", c.queue, "retry_in", delay, "err", err)
		delay = min(2*delay, c.t.cfg.ReconnectMax)
	}
}

// recount republishes a message that came back unacknowledged with its
// delivery count incremented, or moves it to the dead-letter queue once
// the count passes the limit; then acknowledges the original. If that
// publish fails, the message is given back to the broker as it came.
func (c *consumer) recount(d amqp.Delivery) {
	defer c.settled(d.Acknowledger.(*amqp.Channel))
	n := deliveries(d.Headers) + 1
	headers := amqp.Table{headerDeliveries: int64(n)}
	dest := c.queue
	if n > c.limit.MaxDeliveries {
		dest = c.limit.DeadLetter
		headers = amqp.Table{
			headerDeliveries:        int64(n - 1),
			driver.HeaderDeadReason: fmt.Sprintf("handed to a consumer %d times without acknowledgement (limit %d): each consumer crashed or gave it back", n-1, c.limit.MaxDeliveries),
			driver.HeaderDeadQueue:  c.queue,
		}
		c.t.log.Warn("dead-lettering a poison message", "queue", c.queue, "dead_letter", dest, "deliveries", n-1)
	}
	ctx, cancel := context.WithTimeout(c.t.life, c.t.cfg.PublishTimeout)
	defer cancel()
	err := c.t.publishTable(ctx, dest, d.Body, headers)
	if err != nil {
		c.t.log.Warn("could not requeue a redelivered message with its count; giving it back", "queue", c.queue, "err", err)
		_ = c.send(d.Acknowledger, func() error { return d.Nack(false, true) })
		return
	}
	_ = c.send(d.Acknowledger, func() error { return d.Ack(false) })
}

// deliveries reads the delivery count header (1 when absent: the first
// delivery was not counted in a header).
func deliveries(h amqp.Table) int {
	n := 1
	switch v := h[headerDeliveries].(type) {
	case int64:
		n = int(v)
	case int32:
		n = int(v)
	case int:
		n = v
	}
	return max(n, 1) // a publisher's negative count must not buy more deliveries
}

// stop cancels delivery; the channel stays open for acknowledgements of
// what was handed over, and closes when the last is settled (or with the
// connection). basic.cancel and channel.close are never in flight at once
// on one channel. It does not wait for the broker: a quorum queue whose
// leader froze leaves basic.cancel, and a channel.close after it,
// unanswered for as long as the leader stays away, while the connection
// stays up. The broker's answer is awaited on another goroutine; run
// gives back to the queue what arrives meanwhile.
func (c *consumer) stop() {
	c.stopThen(func(ch *amqp.Channel) {
		err := ch.Cancel(c.tag, false)
		c.mu.Lock()
		c.cancelDone = err == nil
		idle := err == nil && c.outstanding[ch] == 0
		c.mu.Unlock()
		if idle {
			c.closeChannel(ch)
		}
	})
}

// stopThen marks the consumer stopped, once, and then runs f with its
// channel, if it has one, on a goroutine of the transport's. It reports
// whether this call stopped it.
func (c *consumer) stopThen(f func(ch *amqp.Channel)) (first bool) {
	c.stopOnce.Do(func() {
		first = true
		// Counted before the consumer leaves the transport's set: a Close
		// that no longer finds it there must still wait for f.
		c.t.wg.Add(1)
		ch := c.markStopped()
		if ch == nil {
			c.t.wg.Done()
			return
		}
		go func() {
			defer c.t.wg.Done()
			f(ch)
		}()
	})
	return first
}

// halt stops the consumer without a word to the broker, for Close: the
// connection's close that follows ends its channel.
func (c *consumer) halt() {
	c.stopOnce.Do(func() { c.markStopped() })
}

// markStopped marks the consumer stopped (run hands nothing more over,
// no resume opens it again, the transport forgets it) and returns its
// current channel. Called once, in stopOnce.
func (c *consumer) markStopped() *amqp.Channel {
	c.mu.Lock()
	c.cancelled = true
	ch := c.ch
	c.mu.Unlock()
	close(c.stopped)
	c.t.mu.Lock()
	delete(c.t.consumers, c)
	c.t.mu.Unlock()
	return ch
}

// abort stops the consumer at once: its channel closes without a
// basic.cancel, so the broker takes back every delivery it holds
// unsettled in the same step as it removes the consumer. Like stop, it
// does not wait for the broker.
func (c *consumer) abort() {
	c.abortOnce.Do(func() {
		close(c.aborted)
		if c.stopThen(c.closeChannel) {
			return
		}
		// Cancelled before: its channel stayed open for the settlements
		// of what it handed over; it goes now, and the broker takes back
		// what is still unsettled.
		c.mu.Lock()
		ch := c.ch
		c.mu.Unlock()
		if ch == nil {
			return
		}
		closed := make(chan struct{})
		if !c.t.spawn(func() { // the broker may not answer: wait for it at most stopWait
			defer close(closed)
			c.closeChannel(ch)
		}) {
			return // the transport is closing: its connection's close ends ch
		}
		timer := time.NewTimer(stopWait)
		defer timer.Stop()
		select {
		case <-closed:
		case <-timer.C:
		}
	})
}

// send runs f, which sends one frame on ch (the Acknowledger of a
// delivery), unless ch is closing: then it sends nothing and fails, and
// the broker takes back what ch held when it closes.
func (c *consumer) send(ack amqp.Acknowledger, f func() error) error {
	c.frames.RLock()
	defer c.frames.RUnlock()
	if ch, ok := ack.(*amqp.Channel); ok && c.closing[ch] {
		return fmt.Errorf("amqpbus: settle a delivery of %s: its channel is closing, so the broker takes it back: %w", c.queue, message.ErrUnavailable)
	}
	return f()
}

// closeChannel closes ch once no frame is being sent on it, and lets
// none be sent after (see frames). It waits for the broker's answer.
func (c *consumer) closeChannel(ch *amqp.Channel) {
	c.frames.Lock()
	if c.closing == nil {
		c.closing = make(map[*amqp.Channel]bool)
	}
	c.closing[ch] = true
	c.frames.Unlock()
	_ = ch.Close()
	c.frames.Lock()
	delete(c.closing, ch) // closed: amqp091-go sends nothing more on it
	c.frames.Unlock()
}

// settled records that a delivery of ch was acknowledged or rejected.
func (c *consumer) settled(ch *amqp.Channel) {
	c.mu.Lock()
	c.outstanding[ch]--
	n := c.outstanding[ch]
	if n <= 0 {
		delete(c.outstanding, ch)
	}
	idle := c.cancelDone && n <= 0 && ch == c.ch
	c.mu.Unlock()
	if idle {
		c.t.spawn(func() { c.closeChannel(ch) }) // not on the caller's goroutine: Close waits for the broker
	}
}

// Cancel implements [driver.Consumer] with basic.cancel; the channel closes
// once the deliveries handed over are settled. It waits for the broker's
// answer at most stopWait. A delivery that arrives once the consumer is
// stopped is not handed over but given back to the queue.
func (c *consumer) Cancel() error {
	c.stop()
	c.awaitStop("cancel")
	return nil
}

// Abort implements [driver.Consumer] by closing the consumer's channel; a
// later settlement of one of its deliveries fails harmlessly, and a
// Release, Retry or DeadLetter still waiting for the broker to confirm
// its copy gives up (the broker requeues the original as the channel
// closes). It waits for the broker at most stopWait, like Cancel.
func (c *consumer) Abort() error {
	c.abort()
	c.awaitStop("abort")
	return nil
}

// stopWait bounds how long Cancel and Abort wait for the broker.
const stopWait = closeTimeout

// awaitStop waits until run returns, or stopWait.
func (c *consumer) awaitStop(what string) {
	timer := time.NewTimer(stopWait)
	defer timer.Stop()
	select {
	case <-c.done:
	case <-timer.C:
		c.t.log.Warn("the broker did not answer a consumer's "+what+" in time; what it delivers from now on goes back to the queue, and what it handed over is taken back once it answers or the connection closes",
			"queue", c.queue, "waited", stopWait)
	}
}

// aborted returns an error once the delivery's consumer was aborted:
// the broker takes the delivery back as the channel closes, so settling
// it does nothing (an acknowledgement racing the close would lose it).
func (d *delivery) aborted(what string) error {
	select {
	case <-d.c.aborted:
		return fmt.Errorf("amqpbus: %s a delivery of %s: its consumer was aborted, so the broker takes it back: %w", what, d.c.queue, message.ErrUnavailable)
	default:
		return nil
	}
}

// delivery adapts amqp.Delivery to [driver.Delivery].
type delivery struct {
	c    *consumer
	s    *session // the session whose channel it came on
	d    amqp.Delivery
	once sync.Once
}

var (
	_ driver.Consumer = (*consumer)(nil)
	_ driver.Delivery = (*delivery)(nil)
)

func (d *delivery) Body() []byte      { return d.d.Body }
func (d *delivery) Redelivered() bool { return d.d.Redelivered }

func (d *delivery) Header(key string) string {
	switch v := d.d.Headers[key].(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// Ack acknowledges the delivery on the channel it came on. After that
// channel closed (connection lost) the broker has requeued it already;
// the error says so and nothing else happens: delivery tags are never
// used on another channel.
func (d *delivery) Ack() error {
	var err error
	d.once.Do(func() {
		if err = d.aborted("acknowledge"); err != nil {
			d.c.settled(d.d.Acknowledger.(*amqp.Channel))
			return
		}
		err = d.c.send(d.d.Acknowledger, func() error { return d.d.Ack(false) })
		d.c.settled(d.d.Acknowledger.(*amqp.Channel))
	})
	return err
}

// Release implements [driver.Delivery]: the message is published again to
// its queue with its delivery and attempt counts unchanged, and the
// original acknowledged; the copy waits at the tail of the queue. If that
// publish fails, the delivery is rejected for redelivery instead.
func (d *delivery) Release() error {
	return d.republish(d.c.queue, "release", nil)
}

// Retry implements [driver.Delivery]: like Release, with
// driver.HeaderAttempts set to attempts on the copy.
func (d *delivery) Retry(attempts int) error {
	return d.republish(d.c.queue, "retry", amqp.Table{driver.HeaderAttempts: int64(attempts)})
}

// DeadLetter implements [driver.Delivery]: the message is published to the
// queue dead with driver.HeaderDeadReason and driver.HeaderDeadQueue, then the
// original is acknowledged. If that publish fails, the delivery is
// rejected for redelivery instead and the error says so.
func (d *delivery) DeadLetter(dead, reason string) error {
	return d.republish(dead, "dead-letter", amqp.Table{driver.HeaderDeadReason: reason, driver.HeaderDeadQueue: d.c.queue})
}

// republish publishes a copy of the delivery to queue with its delivery
// count and the extra headers, then acknowledges the original, once. If
// the publish fails, the delivery is rejected for redelivery instead.
func (d *delivery) republish(queue, what string, extra amqp.Table) error {
	var err error
	d.once.Do(func() {
		ch := d.d.Acknowledger.(*amqp.Channel)
		defer d.c.settled(ch)
		if err = d.aborted(what); err != nil {
			return
		}
		if ch.IsClosed() {
			// The broker took it back when the channel closed (an
			// aborted consumer, a lost connection): a copy would run it
			// twice.
			err = fmt.Errorf("amqpbus: %s a delivery of %s: its channel closed, so the broker requeued it already: %w", what, d.c.queue, message.ErrUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(d.c.t.life, d.c.t.cfg.PublishTimeout)
		defer cancel()
		go func() { // an aborted consumer's channel goes: the broker requeues the original
			select {
			case <-d.c.aborted:
				cancel()
			case <-ctx.Done():
			}
		}()
		headers := amqp.Table{}
		for _, k := range []string{headerDeliveries, driver.HeaderAttempts} {
			if v, ok := d.d.Headers[k]; ok {
				headers[k] = v
			}
		}
		maps.Copy(headers, extra)
		if err = d.c.t.publishTable(ctx, queue, d.d.Body, headers); err != nil {
			err = errors.Join(fmt.Errorf("amqpbus: %s a delivery of %s: %w", what, d.c.queue, err),
				d.c.send(d.d.Acknowledger, func() error { return d.d.Reject(true) }))
			return
		}
		err = d.c.send(d.d.Acknowledger, func() error { return d.d.Ack(false) })
	})
	return err
}

func (d *delivery) Reject(requeue bool) error {
	var err error
	d.once.Do(func() {
		if err = d.aborted("reject"); err != nil {
			d.c.settled(d.d.Acknowledger.(*amqp.Channel))
			return
		}
		err = d.c.send(d.d.Acknowledger, func() error { return d.d.Reject(requeue) })
		d.c.settled(d.d.Acknowledger.(*amqp.Channel))
	})
	return err
}

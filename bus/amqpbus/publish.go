package amqpbus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/message"
)

// pubReq is one publish handed to a publisher goroutine.
type pubReq struct {
	ctx      context.Context
	exchange string // "" for a queue (default exchange), else a fan-out, or an entry if via
	key      string
	via      bool // exchange is an entry (a direct exchange): mandatory, not declared here
	msg      amqp.Publishing
	done     chan error // buffered; receives the outcome once
	at       time.Time  // when it was written to its channel: see confirmStall
}

// A publish the broker has not confirmed for confirmStall stalls every
// later one of its channel: amqp091-go hands confirmations over in
// delivery-tag order, holding each behind any earlier one still missing.
// That happens when a quorum queue's leader froze after the publish
// reached it: the channel then confirms nothing more, to any queue, while
// the connection stays healthy. So the channel is closed: its pending
// publishes end with an outcome unknown (the broker may still deliver
// them) and the next publish opens a new channel. Not while the broker
// blocks the connection (a resource alarm: no confirm is expected). Vars
// for tests.
var (
	confirmStall      = 10 * time.Second
	confirmStallCheck = time.Second
)

// testHookConfirm, when set by a test, sees each confirmation before the
// publisher does: false withholds it, as amqp091-go withholds the
// confirmations that follow a missing one.
var testHookConfirm func(amqp.Confirmation) bool

// publisher owns one channel in confirm mode. Its run goroutine
// publishes; its notify goroutine receives both the returns and the
// confirms. amqp091 hands a mandatory message's return over before its
// confirm, from one reader goroutine, and drops a notification its
// listener has not taken within 5 s (a process paused, descheduled): so
// both go into buffers (notifyBuffer), and the notify goroutine takes
// every return already buffered before it settles a confirm, so it sees
// a message's return before the message's confirm.
type publisher struct {
	t        *Transport
	s        *session
	id       int
	ch       *amqp.Channel
	returns  chan amqp.Return
	confirms chan amqp.Confirmation
	chClosed chan *amqp.Error

	mu       sync.Mutex
	tag      uint64             // delivery tag of the last publish
	pending  map[uint64]*pubReq // by delivery tag
	returned map[string]bool    // message ids returned as unroutable
	broken   bool               // the channel closed: reopen it before the next publish
	reason   string             // why the broker closed the channel, if it said
	stalled  bool               // its oldest publish waited confirmStall: the channel is closing
	declared map[string]bool    // fan-outs declared on this channel

	notified chan struct{} // closed when the notify goroutine of the current channel returns

	// sendMu orders the run goroutine's frames on the channel with
	// checkStall's close of it: run holds it for reading from its check
	// of stalled through its frame; the close takes it for writing once
	// stalled is set, so no frame follows channel.close. RabbitMQ answers
	// a frame on a channel whose close it has confirmed with a
	// connection error (504 CHANNEL_ERROR expected 'channel.open'),
	// which would cost every channel of the connection.
	sendMu sync.RWMutex
}

var messageIDs atomic.Uint64

// notifyBuffer is the room for a channel's returns and for its confirms
// that its notify goroutine has not taken yet: amqp091's reader waits at
// most 5 s for room, then drops the notification (a dropped confirm
// would stall the channel; a dropped return would report a message no
// queue took as sent).
const notifyBuffer = 1024

func newPublisher(s *session, id int) (*publisher, error) {
	t := s.t
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqpbus: open publishing channel: %w", unavailable(err))
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("amqpbus: confirm mode: %w", unavailable(err))
	}
	p := &publisher{
		t:        t,
		s:        s,
		id:       id,
		ch:       ch,
		returns:  ch.NotifyReturn(make(chan amqp.Return, notifyBuffer)),
		confirms: ch.NotifyPublish(make(chan amqp.Confirmation, notifyBuffer)),
		chClosed: ch.NotifyClose(make(chan *amqp.Error, 1)),
		pending:  make(map[uint64]*pubReq),
		returned: make(map[string]bool),
		declared: make(map[string]bool),
		notified: make(chan struct{}),
	}
	return p, nil
}

// reopen replaces a channel the broker closed while the connection lives
// (a publish it refused: 403 ACCESS_REFUSED, 404 NOT_FOUND for a missing
// entry), so one refused publish does not leave the publisher broken
// until the connection drops. It runs on the run goroutine, once the old
// channel's notify goroutine has returned.
func (p *publisher) reopen() error {
	select {
	case <-p.notified:
	case <-p.s.lost:
		return fmt.Errorf("amqpbus: reopen publishing channel %d: the connection is lost: %w", p.id, message.ErrUnavailable)
	case <-p.t.closing:
		return fmt.Errorf("amqpbus: reopen publishing channel %d: %w", p.id, message.ErrClosed)
	}
	ch, err := p.s.conn.Channel()
	if err != nil {
		return fmt.Errorf("amqpbus: reopen publishing channel %d: %w", p.id, unavailable(err))
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return fmt.Errorf("amqpbus: reopen publishing channel %d: confirm mode: %w", p.id, unavailable(err))
	}
	p.mu.Lock()
	p.ch = ch
	p.returns = ch.NotifyReturn(make(chan amqp.Return, notifyBuffer))
	p.confirms = ch.NotifyPublish(make(chan amqp.Confirmation, notifyBuffer))
	p.chClosed = ch.NotifyClose(make(chan *amqp.Error, 1))
	p.tag = 0
	p.pending = make(map[uint64]*pubReq)
	p.returned = make(map[string]bool)
	p.declared = make(map[string]bool)
	p.broken, p.reason, p.stalled = false, "", false
	p.notified = make(chan struct{})
	p.mu.Unlock()
	p.t.wg.Add(1)
	go p.notify()
	return nil
}

// run publishes requests until the transport closes or the channel breaks.
func (p *publisher) run() {
	defer p.t.wg.Done()
	for {
		var r *pubReq
		select {
		case r = <-p.t.reqs:
		case <-p.t.closing:
			return
		case <-p.s.lost:
			return
		}
		if err := r.ctx.Err(); err != nil {
			r.done <- err
			continue
		}
		p.sendMu.RLock()
		p.mu.Lock()
		broken := p.broken || p.stalled // stalled: checkStall is closing the channel
		p.mu.Unlock()
		if broken {
			p.sendMu.RUnlock()
			if err := p.reopen(); err != nil {
				r.done <- notSent(err)
				continue
			}
			p.sendMu.RLock() // the new channel: nothing closes it yet
		}
		if r.exchange != "" && !r.via && !p.declared[r.exchange] {
			// Publishing to a missing exchange would close the channel.
			if err := p.ch.ExchangeDeclare(r.exchange, amqp.ExchangeFanout, false, true, false, false, nil); err != nil {
				p.sendMu.RUnlock()
				r.done <- notSent(p.t.opError(p.s, "declare fan-out "+r.exchange, err))
				continue
			}
			p.declared[r.exchange] = true
		}
		p.mu.Lock()
		p.tag++
		tag := p.tag
		r.at = time.Now()
		p.pending[tag] = r
		p.mu.Unlock()
		err := p.ch.Publish(r.exchange, r.key, r.exchange == "" || r.via, false, r.msg)
		p.sendMu.RUnlock()
		if err != nil {
			p.mu.Lock()
			mine := p.pending[tag] == r // else notify failed it meanwhile
			if mine {
				delete(p.pending, tag)
				p.tag--
			}
			p.mu.Unlock()
			if mine { // r.done takes exactly one outcome; the library wrote no frame of it
				r.done <- notSent(p.t.opError(p.s, "publish to "+target(r), err))
			}
		}
	}
}

// notify resolves publishes from the broker's returns and confirms.
func (p *publisher) notify() {
	defer p.t.wg.Done()
	p.mu.Lock()
	notified, ch := p.notified, p.ch
	p.mu.Unlock()
	defer close(notified)
	tick := time.NewTicker(confirmStallCheck)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			p.checkStall(ch)
		case ret, ok := <-p.returns:
			p.noteReturn(ret, ok)
		case c, ok := <-p.confirms:
			if !ok {
				p.fail()
				return
			}
			if f := testHookConfirm; f != nil && !f(c) {
				continue
			}
			p.takeReturns() // the returns amqp091 handed over before this confirm
			p.mu.Lock()
			r := p.pending[c.DeliveryTag]
			delete(p.pending, c.DeliveryTag)
			var returned bool
			if r != nil {
				returned = p.returned[r.msg.MessageId]
				delete(p.returned, r.msg.MessageId)
			}
			p.mu.Unlock()
			if r == nil {
				continue
			}
			switch {
			case returned:
				r.done <- fmt.Errorf("amqpbus: publish: queue %s does not exist: %w", r.key, message.ErrNoRoute)
			case !c.Ack:
				r.done <- notSent(fmt.Errorf("amqpbus: publish to %s: the broker refused it (nack): %w", target(r), errNacked))
			default:
				r.done <- nil
			}
		case e := <-p.chClosed:
			// The confirms channel closes too; keep draining until it does.
			p.chClosed = nil
			if e != nil {
				p.mu.Lock()
				p.reason = e.Error()
				p.mu.Unlock()
			}
		}
	}
}

// noteReturn records a returned message (ok false: the returns channel
// closed).
func (p *publisher) noteReturn(ret amqp.Return, ok bool) {
	if !ok {
		p.returns = nil
		return
	}
	p.mu.Lock()
	p.returned[ret.MessageId] = true
	p.mu.Unlock()
}

// takeReturns records every return already buffered.
func (p *publisher) takeReturns() {
	for p.returns != nil {
		select {
		case ret, ok := <-p.returns:
			p.noteReturn(ret, ok)
		default:
			return
		}
	}
}

// checkStall closes ch, the publisher's channel, if its oldest pending
// publish has waited confirmStall for its confirmation (see there).
func (p *publisher) checkStall(ch *amqp.Channel) {
	p.t.mu.Lock()
	blocked := p.t.blocked != nil
	p.t.mu.Unlock()
	p.mu.Lock()
	var (
		head *pubReq
		tag  uint64
	)
	for k, r := range p.pending {
		if head == nil || k < tag {
			head, tag = r, k
		}
	}
	if head == nil || blocked || p.stalled || p.ch != ch || time.Since(head.at) < confirmStall {
		p.mu.Unlock()
		return
	}
	p.stalled = true
	waited, n := time.Since(head.at).Round(time.Millisecond), len(p.pending)
	p.reason = fmt.Sprintf("the broker had not confirmed its oldest publish, to %s, for %s, and every later confirmation of a channel waits behind it: closed by cloudbus", target(head), waited)
	p.mu.Unlock()
	p.t.log.Warn("a publish has waited for the broker's confirmation too long; closing its channel, whose later confirmations wait behind it (a quorum queue's leader stalled?); its publishes end with an unknown outcome",
		"channel", p.id, "target", target(head), "waited", waited, "pending", n)
	p.t.wg.Add(1) // on a goroutine the transport counts: this one
	go func() {   // channel.close waits for the broker: not on the notify goroutine
		defer p.t.wg.Done()
		// stalled is set: a frame of run's already under way ends first,
		// and run writes no other one on ch (see sendMu).
		p.sendMu.Lock()
		//lint:ignore SA2001 a barrier: run's frame under way ends before channel.close
		p.sendMu.Unlock()
		_ = ch.Close()
	}()
}

// fail ends every pending publish of a closed channel: the broker may or
// may not have taken them.
func (p *publisher) fail() {
	p.mu.Lock()
	p.broken = true
	pending := p.pending
	p.pending = make(map[uint64]*pubReq)
	reason := p.reason
	p.mu.Unlock()
	if reason != "" {
		reason = " (" + reason + ")"
	}
	for _, r := range pending {
		r.done <- fmt.Errorf("amqpbus: publish to %s: channel closed before the broker confirmed%s; outcome unknown: %w", target(r), reason, message.ErrUnavailable)
	}
}

func target(r *pubReq) string {
	if r.via {
		return "queue " + r.key + " via entry " + r.exchange
	}
	if r.exchange != "" {
		return "fan-out " + r.exchange
	}
	return "queue " + r.key
}

// Publish implements [driver.Transport]: a mandatory, persistent publish to
// the default exchange with the queue name as routing key, confirmed by
// the broker. A message for a missing queue comes back as a return before
// its confirm and fails with message.ErrNoRoute within a round trip.
func (t *Transport) Publish(ctx context.Context, queue string, data []byte) error {
	return t.publish(ctx, "", queue, data, amqp.Persistent)
}

var _ driver.PublishStarter = (*Transport)(nil)

// StartPublish implements [driver.PublishStarter]: Publish, or PublishVia
// through entry, on a goroutine that Close waits for; ctx and Close bound
// it as they bound Publish.
func (t *Transport) StartPublish(ctx context.Context, entry, queue string, data []byte) <-chan error {
	errc := make(chan error, 1)
	started := t.spawn(func() {
		if entry == "" {
			errc <- t.Publish(ctx, queue, data)
		} else {
			errc <- t.PublishVia(ctx, entry, queue, data)
		}
	})
	if !started {
		errc <- fmt.Errorf("amqpbus: publish to queue %s: %w", queue, message.ErrClosed)
	}
	return errc
}

// Broadcast implements [driver.Transport]: a confirmed publish to the
// fan-out exchange; with no queue bound the broker drops it.
func (t *Transport) Broadcast(ctx context.Context, fanout string, data []byte) error {
	return t.publish(ctx, fanout, "", data, amqp.Transient)
}

func (t *Transport) publishVia(ctx context.Context, entry, queue string, data []byte) error {
	return t.publishTo(ctx, entry, queue, true, data, amqp.Persistent)
}

func (t *Transport) publish(ctx context.Context, exchange, key string, data []byte, mode uint8) error {
	return t.publishTo(ctx, exchange, key, false, data, mode)
}

func (t *Transport) publishTo(ctx context.Context, exchange, key string, via bool, data []byte, mode uint8) error {
	op := "publish to queue " + key
	switch {
	case via:
		op += " via entry " + exchange
	case exchange != "":
		op = "broadcast to " + exchange
	}
	ctx, cancel, err := t.admit(ctx, op, len(data))
	defer cancel()
	if err != nil {
		return err
	}
	if exchange == "" {
		key = t.Address(key) // a temporary queue of this transport: its name now
	}
	r := &pubReq{
		ctx:      ctx,
		exchange: exchange,
		key:      key,
		via:      via,
		msg: amqp.Publishing{
			MessageId:    strconv.FormatUint(messageIDs.Add(1), 36),
			DeliveryMode: mode,
			ContentType:  "application/json",
			Body:         data,
		},
		done: make(chan error, 1),
	}
	return t.send(ctx, op, r)
}

// admit checks a publish of size bytes before it is handed to a
// publisher: within MaxMessageSize; bounded by PublishTimeout if ctx has
// no deadline; and, while the broker blocks publishers (memory or disk
// alarm), waiting for it to unblock or for the deadline: never inside
// amqp091, which would ignore ctx. Call cancel in any case.
func (t *Transport) admit(ctx context.Context, op string, size int) (context.Context, context.CancelFunc, error) {
	cancel := func() {}
	if size > t.cfg.MaxMessageSize {
		return ctx, cancel, fmt.Errorf("amqpbus: %s: %d bytes exceeds MaxMessageSize %d: %w", op, size, t.cfg.MaxMessageSize, message.ErrTooLarge)
	}
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, t.cfg.PublishTimeout)
	}
	t.mu.Lock()
	blocked := t.blocked
	t.mu.Unlock()
	if blocked != nil {
		select {
		case <-blocked:
		case <-ctx.Done():
			return ctx, cancel, fmt.Errorf("amqpbus: %s: the broker blocks publishing (resource alarm): %w", op, ctxErr(ctx))
		}
	}
	return ctx, cancel, nil
}

// errNacked is the cause of a publish the broker refused with basic.nack:
// it took none of it (a quorum queue electing a leader, an internal
// error), so the transport publishes it again.
var errNacked = fmt.Errorf("nothing was delivered: %w", message.ErrUnavailable)

// send hands r to a publisher of the current session and waits for its
// outcome or ctx. A publish the broker refuses (basic.nack: a quorum
// queue without a leader during an election, after a broker node was
// lost) is published again, with backoff from 20 ms to 500 ms, until the
// broker confirms it or ctx ends; it is never reported as sent. While the
// transport reconnects, send fails at once with an error matching
// message.ErrNotSent and message.ErrUnavailable: nothing was sent, so
// retrying is safe.
func (t *Transport) send(ctx context.Context, op string, r *pubReq) error {
	delay := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := t.sendOnce(ctx, op, r)
		if !errors.Is(err, errNacked) {
			return err
		}
		t.nacked.Add(1)
		t.log.Debug("the broker refused a publish (nack); publishing it again", "op", op, "attempt", attempt)
		select {
		case <-time.After(jitter(delay)):
		case <-ctx.Done():
			return fmt.Errorf("%w; refused %d times until %w", err, attempt, ctxErr(ctx))
		case <-t.closing:
			return fmt.Errorf("amqpbus: %s: %w", op, message.ErrClosed)
		}
		delay = min(2*delay, 500*time.Millisecond)
		next := *r
		next.msg.MessageId = strconv.FormatUint(messageIDs.Add(1), 36)
		next.done = make(chan error, 1)
		r = &next
	}
}

// sendOnce is one attempt of send.
func (t *Transport) sendOnce(ctx context.Context, op string, r *pubReq) error {
	s, err := t.current(op)
	if err != nil {
		return notSent(err)
	}
	select {
	case t.reqs <- r:
	case <-ctx.Done():
		return fmt.Errorf("amqpbus: %s: no publishing channel free: %w", op, ctxErr(ctx))
	case <-t.closing:
		return fmt.Errorf("amqpbus: %s: %w", op, message.ErrClosed)
	case <-s.lost:
		return notSent(fmt.Errorf("amqpbus: %s: connection lost: %w", op, message.ErrUnavailable))
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("amqpbus: %s: not confirmed in time; outcome unknown: %w", op, ctxErr(ctx))
	case <-s.lost:
		// The publisher that took r may belong to this session; its notify
		// goroutine fails r too, but do not wait for it.
		return fmt.Errorf("amqpbus: %s: connection lost before the broker confirmed; outcome unknown: %w", op, message.ErrUnavailable)
	}
}

// notSent marks err, from a publish given up before any of it reached
// the broker (the transport was reconnecting, the channel could not be
// opened, the library refused the frame, the broker nacked it), with
// message.ErrNotSent, first, so that it is the code a caller and the
// wire see: nothing was delivered and a retry is safe. The error still
// matches message.ErrUnavailable. A closed transport's
// message.ErrClosed, and a ctx error, stay as they are.
func notSent(err error) error {
	if !errors.Is(err, message.ErrUnavailable) || errors.Is(err, message.ErrNotSent) {
		return err
	}
	return &notSentError{err: err}
}

// notSentError is an error of a publish that sent nothing; see notSent.
type notSentError struct{ err error }

func (e *notSentError) Error() string {
	return e.err.Error() + " (nothing was sent: safe to retry)"
}

// Unwrap returns message.ErrNotSent first, then the cause.
func (e *notSentError) Unwrap() []error { return []error{message.ErrNotSent, e.err} }

func ctxErr(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return message.ErrTimeout.WithCause(ctx.Err())
	}
	return message.ErrCanceled.WithCause(ctx.Err())
}

// scrub removes the broker URLs and their passwords from err's text, in
// case a library error quotes them.
func (t *Transport) scrub(err error) string {
	s := err.Error()
	for _, rawURL := range t.urls {
		if u, perr := url.Parse(rawURL); perr == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				s = strings.ReplaceAll(s, pw, "xxxxx")
			}
		}
		s = strings.ReplaceAll(s, rawURL, MaskURL(rawURL))
	}
	return s
}

// publishTable publishes data persistently to queue with headers.
func (t *Transport) publishTable(ctx context.Context, queue string, data []byte, headers amqp.Table) error {
	r := &pubReq{
		ctx: ctx,
		key: t.Address(queue),
		msg: amqp.Publishing{
			MessageId:    strconv.FormatUint(messageIDs.Add(1), 36),
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/json",
			Headers:      headers,
			Body:         data,
		},
		done: make(chan error, 1),
	}
	return t.send(ctx, "publish to queue "+queue, r)
}

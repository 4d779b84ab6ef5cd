package amqpbus

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cloudbus-go/cloudbus/message"
)

// fastPublisher owns one channel that is not in confirm mode, for the
// fast delivery mode: its run goroutine writes each publish of its line
// (Transport.fastReqs[id]) and reports it sent at once. A channel the broker closed (a publish through an
// entry that does not exist: 404 NOT_FOUND) is reopened before the next
// publish.
type fastPublisher struct {
	s  *session
	id int
	ch *amqp.Channel
}

func newFastPublisher(s *session, id int) (*fastPublisher, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqpbus: open fast publishing channel: %w", unavailable(err))
	}
	return &fastPublisher{s: s, id: id, ch: ch}, nil
}

// run publishes fast requests until the transport closes or the
// session ends.
func (p *fastPublisher) run() {
	t, s := p.s.t, p.s
	defer t.wg.Done()
	for {
		var r *pubReq
		select {
		case r = <-t.fastReqs[p.id]:
		case <-t.closing:
			return
		case <-s.lost:
			return
		}
		if err := r.ctx.Err(); err != nil {
			r.done <- err
			continue
		}
		if p.ch.IsClosed() {
			ch, err := s.conn.Channel()
			if err != nil {
				r.done <- notSent(fmt.Errorf("amqpbus: reopen fast publishing channel %d: %w", p.id, unavailable(err)))
				continue
			}
			p.ch = ch
		}
		// Not mandatory: no return to wait for; a missing queue drops it.
		if err := p.ch.Publish(r.exchange, r.key, false, false, r.msg); err != nil {
			r.done <- notSent(t.opError(s, "publish to "+target(r), err))
			continue
		}
		r.done <- nil
	}
}

// PublishFast implements [driver.FastPublisher]: a transient publish,
// neither mandatory nor confirmed, to the default exchange with the
// queue name as routing key, or through entry. It returns once the
// connection took it (into the socket, or into the transport's buffer
// for it, written next unless the broker stopped reading). It waits
// first while more than 512 KiB written to the connection have not been
// seen read by the broker (its liveness probes tell how far it read),
// so that senders faster than the broker wait instead of burying the
// probe under seconds of the broker's reading; a ctx that ends
// meanwhile fails it unsent (message.ErrTimeout at a deadline,
// message.ErrCanceled if cancelled). A missing
// queue or binding, a missing entry (which also closes the publishing
// channel; the next publish opens another), a broker restart and a
// connection lost after the write all lose the message without an
// error.
func (t *Transport) PublishFast(ctx context.Context, entry, queue string, data []byte) error {
	op := "publish fast to queue " + queue
	if entry != "" {
		op += " via entry " + entry
	}
	ctx, cancel, err := t.admit(ctx, op, len(data))
	defer cancel()
	if err != nil {
		return err
	}
	key := queue
	if entry == "" {
		key = t.Address(queue) // a temporary queue of this transport: its name now
	}
	r := &pubReq{
		ctx:      ctx,
		exchange: entry,
		key:      key,
		via:      entry != "",
		msg:      amqp.Publishing{DeliveryMode: amqp.Transient, ContentType: "application/json", Body: data},
		done:     make(chan error, 1),
	}
	s, err := t.current(op)
	if err != nil {
		return notSent(err)
	}
	if err := s.awaitRead(ctx, op); err != nil {
		return err
	}
	// One target's messages take one channel: RabbitMQ keeps the order
	// of a channel's publishes, so a sender's messages to one queue
	// arrive in the order sent, as in the confirmed mode.
	select {
	case t.fastReqs[lineOf(entry, key, len(t.fastReqs))] <- r:
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
		return fmt.Errorf("amqpbus: %s: not written in time; outcome unknown: %w", op, ctxErr(ctx))
	case <-s.lost:
		return fmt.Errorf("amqpbus: %s: connection lost while writing; outcome unknown: %w", op, message.ErrUnavailable)
	}
}

// fastWindow bounds how far fast publishes run ahead of the broker: a
// fast publish waits while more than fastWindow bytes written to the
// connection were written after the newest probe the broker answered
// (the broker has read everything before that probe's frame). Fast
// publishes have no confirmations to pace them. Unbounded, senders
// faster than the broker filled the transport's buffer, the sockets' and
// the broker's with seconds of its reading, a probe queued behind them
// waited longer than ProbeTimeout for its answer, and the transport took
// the healthy connection for a dead one and dropped it, with the
// messages still in those buffers: beside a busy loop on the machine's
// other CPU, 64 senders lost 10,600 to 15,600 of 40,000 fast messages
// that way in 4 of 5 runs, and none in 7 with this bound. 512 KiB is
// about 33 ms of the broker's fastest reading measured here (12,000
// one-way messages of about 1.3 KB a second): a healthy link does not
// reach it, since a sender that finds half of it unproved asks for a
// probe, which the broker answers once it read the other half. A var
// for tests; a transport takes it when dialled (Transport.window).
var fastWindow int64 = 512 << 10

// awaitRead waits until at most fastWindow (t.window) bytes written to the
// connection are unread by the broker, as far as its probes tell, asking
// for a probe meanwhile. It fails with ctx's error if ctx ends first:
// the publish was not sent.
func (s *session) awaitRead(ctx context.Context, op string) error {
	t := s.t
	for {
		unread := s.wc.taken.Load() - s.readMark.Load()
		if unread <= t.window {
			if s.wc.taken.Load()-s.probeMark.Load() > t.window/2 {
				s.askProbe() // move the marks on while the senders write
			}
			return nil
		}
		wake := t.probeWaiter()
		if s.wc.taken.Load()-s.readMark.Load() <= t.window {
			continue // a probe answered before wake was taken
		}
		s.askProbe()
		select {
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("amqpbus: %s: not sent: the broker has not read the %d KiB written before it: %w", op, unread>>10, ctxErr(ctx))
		case <-t.closing:
			return fmt.Errorf("amqpbus: %s: %w", op, message.ErrClosed)
		case <-s.lost:
			return notSent(fmt.Errorf("amqpbus: %s: connection lost: %w", op, message.ErrUnavailable))
		}
	}
}

// lineOf picks one of n fast publishers for a target: FNV-1a of entry
// and key.
func lineOf(entry, key string, n int) int {
	h := uint32(2166136261)
	for _, s := range [2]string{entry, key} {
		for i := 0; i < len(s); i++ {
			h ^= uint32(s[i])
			h *= 16777619
		}
	}
	return int(h % uint32(n))
}

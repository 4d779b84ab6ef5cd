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
// for it, written next unless the broker stopped reading). A missing
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

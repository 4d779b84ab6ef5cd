package membus

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/message"
)

var _ driver.FastPublisher = (*Transport)(nil)

// PublishFast implements [driver.FastPublisher] as RabbitMQ does: like
// Publish and PublishVia, but a missing queue or binding drops the
// message silently instead of failing with message.ErrNoRoute.
func (t *Transport) PublishFast(ctx context.Context, entry, queue string, data []byte) error {
	var err error
	if entry == "" {
		err = t.Publish(ctx, queue, data)
	} else {
		err = t.PublishVia(ctx, entry, queue, data)
	}
	if errors.Is(err, message.ErrNoRoute) {
		return nil
	}
	return err
}

var _ driver.ConsumerCounter = (*Transport)(nil)

// Consumers implements [driver.ConsumerCounter]: the consumers of queue
// whose transport is alive (a killed one's are gone, as the broker drops
// a dead process's), reachable or not (a partitioned one's stay, as the
// broker keeps a cut-off process's until it gives up on its connection).
func (t *Transport) Consumers(ctx context.Context, name string) (int, error) {
	var n int
	err := t.withQueue(ctx, "count the consumers of", name, func(q *queue) { n = len(q.consumers) })
	return n, err
}

var _ driver.MessageCounter = (*Transport)(nil)

// Messages implements [driver.MessageCounter]: the ready messages of
// queue, not those delivered and not yet settled.
func (t *Transport) Messages(ctx context.Context, name string) (int, error) {
	var n int
	err := t.withQueue(ctx, "count the messages of", name, func(q *queue) { n = len(q.msgs) })
	return n, err
}

// withQueue calls f with queue, under the network's lock, if the
// transport may reach it.
func (t *Transport) withQueue(ctx context.Context, op, name string, f func(q *queue)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := t.checkLocked(op, name); err != nil {
		return err
	}
	q, ok := n.queues[name]
	if !ok {
		return fmt.Errorf("membus: %s queue %s: it does not exist: %w", op, name, message.ErrNoRoute)
	}
	f(q)
	return nil
}

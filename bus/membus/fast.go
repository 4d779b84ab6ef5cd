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
func (t *Transport) Consumers(ctx context.Context, queue string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := t.checkLocked("count the consumers of", queue); err != nil {
		return 0, err
	}
	q, ok := n.queues[queue]
	if !ok {
		return 0, fmt.Errorf("membus: count the consumers of queue %s: it does not exist: %w", queue, message.ErrNoRoute)
	}
	return len(q.consumers), nil
}

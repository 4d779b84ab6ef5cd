package membus

import (
	"context"
	"errors"

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

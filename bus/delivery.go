package bus

import (
	"context"
	"fmt"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
)

// DeliveryMode is how the bus hands calls and one-way messages to the
// broker ([Config].Delivery, [WithDelivery]). docs/delivery.md says what
// each mode guarantees under each fault.
type DeliveryMode uint8

const (
	// Confirmed, the default: a persistent, mandatory publish that the
	// broker confirmed. Send returns only once the broker took the
	// message; a missing queue fails at once with message.ErrNoRoute; a
	// message in a durable queue survives a broker restart. A Call ends
	// with its reply even if the broker has not confirmed its request
	// yet (the reply proves that the request arrived), and fails as soon
	// as the broker refuses the request.
	Confirmed DeliveryMode = iota
	// Fast: a transient publish, neither mandatory nor confirmed, which
	// returns once the message left this process. A missing queue drops
	// it silently (a Call then ends at its deadline), as does a broker
	// restart or a connection lost while it was on its way; nothing tells
	// the sender. A Call's reply goes back in the mode of its request. For
	// calls, whose caller waits for the reply anyway, and one-way messages
	// that may be lost.
	Fast
)

// String returns "confirmed" or "fast".
func (m DeliveryMode) String() string {
	switch m {
	case Confirmed:
		return "confirmed"
	case Fast:
		return "fast"
	}
	return fmt.Sprintf("DeliveryMode(%d)", uint8(m))
}

// HeaderDelivery marks a message sent in the [Fast] mode (value "fast"):
// its reply goes back in the same mode. A sender in another language may
// set it.
const HeaderDelivery = "cloudbus-delivery"

// WithDelivery sends this message in mode m instead of Config.Delivery.
// Broadcast ignores it: events always go as Broadcast describes.
func WithDelivery(m DeliveryMode) Option {
	return Option{func(o *busx.CallOptions) { o.Delivery = uint8(m) + 1 }}
}

// fastOption reports whether o (or, without WithDelivery, the bus's
// Config.Delivery) asks for the fast mode.
func (b *CloudBus) fastOption(o busx.CallOptions) bool {
	if o.Delivery != 0 {
		return DeliveryMode(o.Delivery-1) == Fast
	}
	return b.cfg.Delivery == Fast
}

// isFast reports whether env was sent in the fast mode.
func isFast(env *wire.Envelope) bool { return env.Headers[HeaderDelivery] == "fast" }

// markFast marks env as sent in the fast mode. env.Headers is the
// message's own map (the call's, or a copy).
func markFast(env *wire.Envelope) {
	if env.Headers == nil {
		env.Headers = make(map[string]string, 1)
	}
	env.Headers[HeaderDelivery] = "fast"
}

// publishData publishes data to queue, through entry unless it is "", in
// the fast mode if fast and the transport offers it.
func (b *CloudBus) publishData(ctx context.Context, entry, queue string, data []byte, fast bool) error {
	if fast {
		if fp, ok := b.tr.(driver.FastPublisher); ok {
			return fp.PublishFast(ctx, entry, queue, data)
		}
	}
	if entry != "" {
		return b.tr.PublishVia(ctx, entry, queue, data)
	}
	return b.tr.Publish(ctx, queue, data)
}

package bus

import (
	"context"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/wire"
)

// deadline is a received message's deadline on this process's clock.
type deadline struct {
	at time.Time // zero: the message has none
}

// late reports whether the deadline has passed at now.
func (d deadline) late(now time.Time) bool { return !d.at.IsZero() && !now.Before(d.at) }

// context returns a child of parent that ends at the deadline.
func (d deadline) context(parent context.Context) (context.Context, context.CancelFunc) {
	if d.at.IsZero() {
		return context.WithCancel(parent)
	}
	return context.WithDeadline(parent, d.at)
}

// deadlineOf returns env's deadline on this process's clock, as read at
// arrived. With cluster time (Config.Clock) and an absolute deadline in
// the envelope, it is that deadline less this clock's error bound, so a
// message that waited anywhere before it was read (a queue, a prefetch
// buffer, the socket of a paused process) is known to be late. The
// relative timeout, counted from arrival, bounds it too: it is what a
// receiver without cluster time uses, and no clock error can make a
// deadline later than it.
func (b *CloudBus) deadlineOf(env *wire.Envelope, arrived time.Time) deadline {
	var at time.Time
	if env.Timeout > 0 {
		at = arrived.Add(env.Timeout)
	}
	if env.Deadline > 0 && b.cfg.Clock != nil {
		local := time.Now()
		if now, bound, ok := b.cfg.Clock.ClusterTime(); ok {
			abs := local.Add(time.Unix(0, env.Deadline).Sub(now) - bound)
			if at.IsZero() || abs.Before(at) {
				at = abs
			}
		}
	}
	return deadline{at: at}
}

// stampDeadline writes ctx's deadline into env: the time left, and, when
// this bus knows the cluster time, the absolute deadline in cluster time,
// less this clock's error bound so that no receiver can take it for
// later than it is. It fails if the deadline has passed.
func (b *CloudBus) stampDeadline(ctx context.Context, env *wire.Envelope) error {
	dl, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	left := time.Until(dl)
	if left <= 0 {
		return ctxError(ctx)
	}
	env.Timeout = left
	if b.cfg.Clock != nil {
		if now, bound, ok := b.cfg.Clock.ClusterTime(); ok {
			env.Deadline = now.Add(left - bound).UnixNano()
		}
	}
	return nil
}

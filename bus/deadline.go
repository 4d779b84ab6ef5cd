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

func (d deadline) late(now time.Time) bool { return !d.at.IsZero() && !now.Before(d.at) }

func (d deadline) context(parent context.Context) (context.Context, context.CancelFunc) {
	if d.at.IsZero() {
		return context.WithCancel(parent)
	}
	return context.WithDeadline(parent, d.at)
}

// deadlineOf returns env's deadline as read at arrived: the earlier of
// arrival + timeout and, with cluster time, the absolute deadline less this
// clock's error bound.
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

// stampDeadline writes ctx's deadline into env: the time left and, with
// cluster time, the absolute deadline less this clock's error bound. It
// fails if the deadline has passed.
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

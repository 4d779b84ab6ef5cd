package bus

import (
	"context"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/internal/busx"
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
	b.stampLeft(env, left)
	if env.Deadline != 0 && busx.IsTimeLeftOnly(ctx) {
		env.Deadline = 0
	}
	return nil
}

// stampLeft gives env left to run from now: the time left and, with
// cluster time, the absolute deadline less this clock's error bound; no
// deadline if left is not positive.
func (b *CloudBus) stampLeft(env *wire.Envelope, left time.Duration) {
	env.Timeout, env.Deadline = 0, 0
	if left <= 0 {
		return
	}
	env.Timeout = left
	if b.cfg.Clock != nil {
		if now, bound, ok := b.cfg.Clock.ClusterTime(); ok {
			env.Deadline = now.Add(left - bound).UnixNano()
		}
	}
}

// replyContext is context.WithTimeout(context.Background(), d) for the
// publish of a reply, made lazily: its timer exists only once something
// waits on Done. A publish that does not block (membus, the fast mode)
// never waits, and the context then costs one allocation instead of
// four. stop is the cancel function.
type replyContext struct {
	at time.Time

	mu      sync.Mutex
	ctx     context.Context // made by the first Done
	cancel  context.CancelFunc
	stopped bool
}

func newReplyContext(d time.Duration) *replyContext {
	return &replyContext{at: time.Now().Add(d)}
}

// Deadline implements [context.Context].
func (c *replyContext) Deadline() (time.Time, bool) { return c.at, true }

// Done implements [context.Context].
func (c *replyContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		c.ctx, c.cancel = context.WithDeadline(context.Background(), c.at)
		if c.stopped {
			c.cancel()
		}
	}
	return c.ctx.Done()
}

// Err implements [context.Context].
func (c *replyContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.ctx != nil:
		return c.ctx.Err()
	case c.stopped:
		return context.Canceled
	case !time.Now().Before(c.at):
		return context.DeadlineExceeded
	}
	return nil
}

// Value implements [context.Context]: a reply's context carries none.
func (c *replyContext) Value(any) any { return nil }

// stop cancels c and releases its timer, if it made one.
func (c *replyContext) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if c.cancel != nil {
		c.cancel()
	}
}

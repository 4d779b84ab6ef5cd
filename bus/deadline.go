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

// context returns parent with the deadline, made lazily; stop it when
// done.
func (d deadline) context(parent context.Context) *lazyContext {
	return newLazyContext(parent, d.at)
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

// lazyContext is context.WithDeadline(parent, at) (context.WithCancel
// for a zero at), made lazily: the context, its timer and its channel
// exist only once something waits on Done or looks up a Value. A handler
// that never does, and the publish of a reply that does not block
// (membus, the fast mode), then cost one allocation instead of four and
// no timer. stop is the cancel function.
type lazyContext struct {
	parent context.Context
	at     time.Time

	mu      sync.Mutex
	ctx     context.Context // made by the first Done or Value
	cancel  context.CancelFunc
	stopped bool
}

// newLazyContext returns a context ending at at, or with parent; stop
// it when done.
func newLazyContext(parent context.Context, at time.Time) *lazyContext {
	return &lazyContext{parent: parent, at: at}
}

// newReplyContext is context.WithTimeout(context.Background(), d), made
// lazily.
func newReplyContext(d time.Duration) *lazyContext {
	return newLazyContext(context.Background(), time.Now().Add(d))
}

// Deadline implements [context.Context].
func (c *lazyContext) Deadline() (time.Time, bool) {
	if c.at.IsZero() {
		return c.parent.Deadline()
	}
	if pd, ok := c.parent.Deadline(); ok && pd.Before(c.at) {
		return pd, true
	}
	return c.at, true
}

// made returns the context, making it first; c.mu is held.
func (c *lazyContext) made() context.Context {
	if c.ctx == nil {
		if c.at.IsZero() {
			c.ctx, c.cancel = context.WithCancel(c.parent)
		} else {
			c.ctx, c.cancel = context.WithDeadline(c.parent, c.at)
		}
		if c.stopped {
			c.cancel()
		}
	}
	return c.ctx
}

// Done implements [context.Context].
func (c *lazyContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.made().Done()
}

// Err implements [context.Context].
func (c *lazyContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx != nil {
		return c.ctx.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	switch {
	case c.stopped:
		return context.Canceled
	case !c.at.IsZero() && !time.Now().Before(c.at):
		return context.DeadlineExceeded
	}
	return nil
}

// Value implements [context.Context]: the parent's values. The context
// is made first (but for context.Background, which has none), so that
// what the context package looks up through Value (context.Cause) finds
// this context's own state.
func (c *lazyContext) Value(key any) any {
	if c.parent == context.Background() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.made().Value(key)
}

// stop cancels c and releases its timer, if it made one.
func (c *lazyContext) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if c.cancel != nil {
		c.cancel()
	}
}

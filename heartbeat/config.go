package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Config sets a [Monitor]'s timing; a zero field takes its default. Valid:
// no negative duration, Interval ≤ Lease ≤ EvictAfter-Interval.
type Config struct {
	// Interval is the round period. Default 500 ms.
	Interval time.Duration
	// Lease is how long after its last beat a node's lease expires: it
	// stops handling messages about resources. Default
	// max(EvictAfter-2×Interval, Interval).
	Lease time.Duration
	// EvictAfter: a record older than this is evicted; at least
	// 2×Interval. Default 3 s.
	EvictAfter time.Duration
	// OpTimeout bounds each store call. Default Interval.
	OpTimeout time.Duration
	// BusDownAfter is rule 5's bus-down time. Default Lease.
	BusDownAfter time.Duration
	// BusSettle is rule 5's bus-up time. Default 2×EvictAfter.
	BusSettle time.Duration
	// Now is the node's clock, for durations only. Default time.Now.
	Now func() time.Time
	// SessionLocks makes the node hold its session lock for its life
	// and evict a peer whose session lock is free once the peer's beat
	// is a quarter Interval late, instead of waiting for EvictAfter: a
	// dead process loses its database session, and with it its lock, at
	// once (see [SessionLocker]). A peer that is frozen, slow or cut off
	// keeps its session and is left to the other rules. It needs a store
	// that implements SessionLocker; on others it does nothing. Default
	// off.
	SessionLocks bool
	// ConfirmDead, if set, is asked before a peer whose session lock is
	// free is evicted for it, and the peer is evicted only if it reports
	// true: a second signal of the process's death, such as the broker
	// having dropped the peer's consumers (package service sets it so). A
	// database session also ends when a live node's connection is reset;
	// a reset that also delays the node's beat would otherwise evict it.
	ConfirmDead func(ctx context.Context, node string) (bool, error)
}

// DefaultConfig is for production.
func DefaultConfig() Config {
	return Config{
		Interval:   500 * time.Millisecond, // two small writes per node per second
		Lease:      2 * time.Second,        // fence after four missed beats...
		EvictAfter: 3 * time.Second,        // ...one second before peers may evict
		OpTimeout:  500 * time.Millisecond, // a store call slower than a beat period counts as missed
	}
}

// TestConfig is for tests and demos in one process.
func TestConfig() Config {
	return Config{
		Interval:   50 * time.Millisecond,  // fast enough for demos
		Lease:      200 * time.Millisecond, // as DefaultConfig, scaled
		EvictAfter: 300 * time.Millisecond, // five missed beats, as in DefaultConfig
		OpTimeout:  50 * time.Millisecond,  // one period
	}
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	d := DefaultConfig()
	if c.Interval == 0 {
		c.Interval = d.Interval
	}
	if c.EvictAfter == 0 {
		c.EvictAfter = d.EvictAfter
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = c.Interval
	}
	if c.Lease == 0 {
		c.Lease = max(c.EvictAfter-2*c.Interval, c.Interval)
	}
	if c.BusDownAfter == 0 {
		c.BusDownAfter = c.Lease
	}
	if c.BusSettle == 0 {
		c.BusSettle = 2 * c.EvictAfter
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports every problem with c, with defaults applied.
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	if c.Interval < 0 || c.EvictAfter < 0 || c.OpTimeout < 0 || c.Lease < 0 || c.BusDownAfter < 0 || c.BusSettle < 0 {
		errs = append(errs, errors.New("heartbeat: config: durations must not be negative"))
	}
	if c.EvictAfter < 2*c.Interval {
		errs = append(errs, fmt.Errorf("heartbeat: config: EvictAfter %s must be at least twice Interval %s, or one late beat evicts a live node", c.EvictAfter, c.Interval))
	}
	if c.Lease < c.Interval || c.Lease > c.EvictAfter-c.Interval {
		errs = append(errs, fmt.Errorf("heartbeat: config: Lease %s must lie between Interval %s and EvictAfter-Interval %s, so that a node fences itself at least one interval before peers may evict it", c.Lease, c.Interval, c.EvictAfter-c.Interval))
	}
	return errors.Join(errs...)
}

// LocalConfig is the old name of [TestConfig].
//
// Deprecated: use TestConfig; LocalConfig will be removed in the next release.
func LocalConfig() Config { return TestConfig() }

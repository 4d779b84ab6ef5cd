package heartbeat

import (
	"errors"
	"fmt"
	"time"
)

// Config sets the timing of a [Monitor]. The zero value of a field takes
// its [DefaultConfig] value.
//
// With beat interval H and eviction threshold E, a node that dies is
// evicted between E and E+H after its last beat (the next check after its
// record turns E old), and every ring drops it as soon as the evictor's
// NodeLeft broadcast arrives; peers that miss the broadcast drop it at
// their next check. A live node is evicted only if none of roughly E/H
// consecutive beats reached the store. After a store outage that every
// node saw, nobody evicts before its third successful round, so live
// nodes are not evicted for the outage (see the package documentation).
type Config struct {
	// Interval is the beat and check period H: every Interval the monitor
	// beats, lists the records and evicts stale ones. The first beat is
	// delayed by a random fraction of Interval so nodes do not beat in
	// lockstep.
	Interval time.Duration
	// EvictAfter is the eviction threshold E: a record older than this,
	// by the store's clock, is evicted. Must be at least 2×Interval.
	EvictAfter time.Duration
	// OpTimeout bounds each store operation. Default: Interval.
	OpTimeout time.Duration
}

// DefaultConfig is for production: beat every 1 s, evict after 6 s.
//
// ZStack beats every 5 s and evicts after about 35-40 s (7-8 missed
// beats), which keeps a dead node's resources orphaned for over half a
// minute. Akka's default failure detection takes about 25 s; Dapr's
// placement service fails over in about 3-5 s. We aim for failover in
// seconds without false evictions: a 1 s beat is a trivial load for a
// database (one small UPDATE per node per second), and 6 s tolerates five
// consecutive lost or slow beats — a long GC pause, a database failover
// blip of a few seconds, a saturated network — before a live node is
// declared dead. A dead node is then replaced within 6-7 s.
func DefaultConfig() Config {
	return Config{
		Interval:   time.Second,     // one small write per node per second
		EvictAfter: 6 * time.Second, // five missed beats before eviction
		OpTimeout:  time.Second,     // a store call slower than a beat period counts as missed
	}
}

// LocalConfig is for tests and demos in one process: beat every 50 ms,
// evict after 300 ms. Too fast for a real database or network.
func LocalConfig() Config {
	return Config{
		Interval:   50 * time.Millisecond,  // fast enough for demos
		EvictAfter: 300 * time.Millisecond, // five missed beats, as in DefaultConfig
		OpTimeout:  50 * time.Millisecond,  // one period
	}
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
}

// Validate reports every problem with c at once. Zero fields are valid
// (they take defaults).
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	if c.Interval < 0 || c.EvictAfter < 0 || c.OpTimeout < 0 {
		errs = append(errs, errors.New("heartbeat: config: durations must not be negative"))
	}
	if c.EvictAfter < 2*c.Interval {
		errs = append(errs, fmt.Errorf("heartbeat: config: EvictAfter %s must be at least twice Interval %s, or one late beat evicts a live node", c.EvictAfter, c.Interval))
	}
	return errors.Join(errs...)
}

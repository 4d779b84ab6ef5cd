package heartbeat

import (
	"errors"
	"fmt"
	"time"
)

// Config sets the timing of a [Monitor]. The zero value of a field takes
// its [DefaultConfig] value.
//
// The timing is safe by construction. With beat interval H, lease L and
// eviction threshold E (H ≤ L ≤ E-H):
//
//   - A node that cannot write a beat for longer than L after the last
//     one it sent stops handling resource messages (it is self-fenced,
//     [Monitor.Fenced]) until a beat succeeds again.
//   - Peers evict a record only once it is older than E by the store's
//     clock. The store stamped that last beat no earlier than the node sent
//     it, so the fence always closes at least E-L before any peer can
//     evict: two nodes never both believe they own a resource because of
//     a beat that did not land.
//   - A dead node is evicted between E and E+H after its last beat (the
//     next check after its record turns E old); every ring drops it as
//     soon as the evictor's NodeLeft broadcast arrives.
//   - Nobody evicts while it cannot reach the store itself, nor before its
//     third successful round after an outage, so a database blip evicts
//     nobody (see the package documentation).
type Config struct {
	// Interval is the beat and check period H: every Interval the monitor
	// beats, lists the records and evicts stale ones. The first beat is
	// delayed by a random fraction of Interval so nodes do not beat in
	// lockstep.
	Interval time.Duration
	// Lease is L: a node whose last successful beat was sent longer than
	// this ago is fenced (see [Monitor.Fenced]). Default EvictAfter - 2×
	// Interval; at least Interval and at most EvictAfter - Interval, so
	// the fence closes at least one interval before a peer may evict.
	Lease time.Duration
	// EvictAfter is the eviction threshold E: a record older than this,
	// by the store's clock, is evicted. Must be at least 2×Interval.
	EvictAfter time.Duration
	// OpTimeout bounds each store operation. Default: Interval.
	OpTimeout time.Duration
	// BusDownAfter is how long a node may report, with its beats, that it
	// cannot reach the message bus before a peer that reaches it evicts
	// it (rule 5 of the package documentation): a node that beats but
	// receives nothing is a zombie, its resources unreachable. Default:
	// Lease, so that a node cut off from the bus is out of every ring
	// about as fast as one that stopped beating would be fenced.
	BusDownAfter time.Duration
	// BusSettle is how long a monitor whose own bus came back waits
	// before it evicts anyone for its bus (rule 5): after a bus outage
	// that every node saw, the others must have had time to reconnect
	// and beat again. Default 2×EvictAfter.
	BusSettle time.Duration
	// Now is the node's clock, for intervals and the lease. Default
	// time.Now. Only durations between its readings matter: a node clock
	// that is minutes off changes nothing (ages come from the store's
	// clock); tests inject skew with it.
	Now func() time.Time
}

// DefaultConfig is for production: beat every 500 ms, fence after 2 s
// without a beat, evict after 3 s.
//
// ZStack beats every 5 s and evicts after about 35-40 s (7-8 missed
// beats), which leaves a dead node's resources orphaned for over half a
// minute. Akka Cluster's default failure detection takes about 25 s;
// Dapr's placement service fails over in about 3-5 s. We fail over in
// 3-3.5 s: a 500 ms beat is a trivial load for a database (two small
// UPDATEs and two small SELECTs per node per second), and 3 s tolerates
// five consecutive lost or slow beats before a node is declared dead.
// That is safe rather than merely tolerant because of the lease: a node
// whose beats stopped landing fences itself after 2 s, a full second
// before anyone may evict it, and a store outage seen by everyone evicts
// nobody. A node evicted while alive (a long pause, its own network
// trouble) notices at its next beat and rejoins with a new epoch.
func DefaultConfig() Config {
	return Config{
		Interval:   500 * time.Millisecond, // two small writes per node per second
		Lease:      2 * time.Second,        // fence after four missed beats...
		EvictAfter: 3 * time.Second,        // ...one second before peers may evict
		OpTimeout:  500 * time.Millisecond, // a store call slower than a beat period counts as missed
	}
}

// LocalConfig is for tests and demos in one process: beat every 50 ms,
// fence after 200 ms, evict after 300 ms. Too fast for a real database or
// network.
func LocalConfig() Config {
	return Config{
		Interval:   50 * time.Millisecond,  // fast enough for demos
		Lease:      200 * time.Millisecond, // as DefaultConfig, scaled
		EvictAfter: 300 * time.Millisecond, // five missed beats, as in DefaultConfig
		OpTimeout:  50 * time.Millisecond,  // one period
	}
}

// WithDefaults returns c with every zero field set to its default, as
// a [Monitor] uses it.
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

// Validate reports every problem with c at once. Zero fields are valid
// (they take defaults).
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

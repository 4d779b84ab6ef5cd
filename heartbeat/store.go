package heartbeat

import (
	"context"
	"errors"
	"time"
)

// Store holds the membership records (one per live node, with its
// epoch, beat sequence, age and bus status) and the names of each node's
// durable queues.
//
// Every time is the store's own: writes stamp the store's clock, List
// reports ages by it, and StoreTime reads it. Every write to a record is
// a single conditional operation.
//
// Implementations are safe for concurrent use, honour ctx (a call with a
// done ctx changes nothing and returns an error matching ctx's), and pass
// the conformance suite in heartbeat/storetest.
type Store interface {
	// Register creates node's record, or replaces the record of an
	// earlier life of node, with a new epoch (different from every epoch
	// node had before in this store), sequence 0, a beat stamped now and
	// the bus up.
	Register(ctx context.Context, node string) (epoch int64, err error)

	// Beat stamps node's record now and increments its sequence, if the
	// record exists with this epoch; the bus status is unchanged.
	// Otherwise Beat changes nothing and returns an error matching
	// ErrEvicted.
	Beat(ctx context.Context, node string, epoch int64) error

	// BeatBus is Beat, with the same condition and errors, that also
	// records whether node reaches the message bus: the first beat with
	// busUp false stamps the start of the outage, later ones keep that
	// stamp, one with busUp true clears it.
	BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error

	// List returns every record with its age and [Record.BusDown] by the
	// store's clock, in no particular order. The caller owns the slice.
	List(ctx context.Context) ([]Record, error)

	// Evict deletes node's record only if it still has this epoch and
	// sequence, and reports whether this call deleted it: of concurrent
	// evictors of one record, exactly one gets true.
	Evict(ctx context.Context, node string, epoch, seq int64) (bool, error)

	// Deregister deletes node's record if it has this epoch. Deleting a
	// record that is already gone is not an error.
	Deregister(ctx context.Context, node string, epoch int64) error

	// StoreTime returns the time of the clock the store stamps beats
	// with, read in one round trip, and that clock's resolution (at most
	// a millisecond).
	StoreTime(ctx context.Context) (now time.Time, resolution time.Duration, err error)

	// AddQueues records queues as node's. Names compare byte for byte;
	// recording one again is a no-op. A node's queues outlive its record.
	AddQueues(ctx context.Context, node string, queues []string) error

	// Queues returns every recorded queue, by node, each name once, in
	// no particular order. The caller owns the map and its slices.
	Queues(ctx context.Context) (map[string][]string, error)

	// RemoveQueues forgets queues of node; forgetting one that is not
	// recorded is a no-op.
	RemoveQueues(ctx context.Context, node string, queues []string) error
}

// Record is one node's membership record as the store saw it.
type Record struct {
	// Node is the node's canonical UUID.
	Node string
	// Epoch identifies this life of the node; it changes on every Register.
	Epoch int64
	// Seq counts the beats of this life (Beat and BeatBus).
	Seq int64
	// Age is the time since the last beat (or the registration), by the
	// store's clock, when List read it.
	Age time.Duration
	// BusDown is how long the node has been reporting, with each beat,
	// that it cannot reach the message bus, by the store's clock; 0 if it
	// reaches it.
	BusDown time.Duration
}

// ErrEvicted is returned by Beat and BeatBus when the node's record is gone or
// belongs to another epoch: peers evicted this node (or it was
// re-registered). The node must stop serving; to serve again it registers
// a new epoch. Retrying Beat is pointless.
var ErrEvicted = errors.New("heartbeat: this node's record is gone: it was evicted; stop serving and register again")

// ErrClosed is returned by a store used after its Close, and by
// [Monitor.Join] after [Monitor.Leave]. Retrying is pointless.
var ErrClosed = errors.New("heartbeat: closed")

package heartbeat

import (
	"context"
	"errors"
	"time"
)

// Store holds the membership records: one per live management node, with
// the node's registration epoch and its last heartbeat. It is the only
// state the nodes share besides the ring.
//
// Every time is the store's own: Register and Beat stamp the store's
// clock, and List reports each record's age by the store's clock, so
// skewed node clocks cannot make a healthy node look stale. Every write is
// a single conditional operation, so concurrent nodes cannot undo each
// other's decisions.
//
// Implementations are safe for concurrent use, honour ctx, and run the
// conformance suite in heartbeat/storetest.
type Store interface {
	// Register creates node's record, or replaces the record of an
	// earlier life of node, with a new epoch (different from every epoch
	// node had before in this store), sequence 0 and a beat stamped now.
	Register(ctx context.Context, node string) (epoch int64, err error)

	// Beat stamps node's record now and increments its sequence, if the
	// record exists with this epoch. Otherwise the node was evicted (or
	// re-registered by a newer life): Beat changes nothing and returns an
	// error matching ErrEvicted.
	Beat(ctx context.Context, node string, epoch int64) error

	// List returns every record with its age by the store's clock, in no
	// particular order. The caller owns the slice.
	List(ctx context.Context) ([]Record, error)

	// Evict deletes node's record only if it still has this epoch and
	// sequence, that is if it is still exactly as stale as the evictor saw
	// it in List: a node that beat since is never evicted, and of two
	// evictors only one wins. It reports whether this call deleted it.
	Evict(ctx context.Context, node string, epoch, seq int64) (bool, error)

	// Deregister deletes node's record if it has this epoch (a goodbye).
	// Deleting a record that is already gone is not an error.
	Deregister(ctx context.Context, node string, epoch int64) error
}

// Record is one node's membership record as the store saw it.
type Record struct {
	// Node is the node's canonical UUID.
	Node string
	// Epoch identifies this life of the node; it changes on every Register.
	Epoch int64
	// Seq counts the beats of this life; it changes on every Beat.
	Seq int64
	// Age is the time since the last beat (or the registration), by the
	// store's clock, when List read it.
	Age time.Duration
}

// ErrEvicted is returned by Beat when the node's record is gone or
// belongs to another epoch: peers evicted this node (or it was
// re-registered). The node must stop serving; to serve again it registers
// a new epoch. Retrying Beat is pointless.
var ErrEvicted = errors.New("heartbeat: this node's record is gone: it was evicted; stop serving and register again")

// ErrClosed is returned by a store used after its Close, and by
// [Monitor.Join] after [Monitor.Leave]. Retrying is pointless.
var ErrClosed = errors.New("heartbeat: closed")

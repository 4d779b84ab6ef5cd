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

// BusReporter is implemented by a [Store] that records, with each beat,
// whether the node reaches the message bus, so that peers can tell a
// node cut off from the bus (a zombie: it beats, but nothing reaches it)
// from a bus outage everyone sees. See rule 5 of the package
// documentation.
type BusReporter interface {
	// BeatBus is Beat, with the same contract, that also records busUp:
	// the first beat reporting the bus down stamps the store's clock as
	// the start of the outage, later ones keep that stamp, a beat
	// reporting it up clears it. List then reports [Record.BusDown].
	BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error
}

// QueueBook is implemented by a [Store] that also keeps the names of the
// durable queues each node declared, so that survivors can find the
// queues of a node that died and drain them: a broker such as RabbitMQ
// cannot list its queues to a client. Names are recorded per node, not
// per epoch: a node that rejoins declares the same queues.
type QueueBook interface {
	// AddQueues records queues as node's; recording one again is a
	// no-op.
	AddQueues(ctx context.Context, node string, queues []string) error
	// Queues returns every recorded queue, by node, in no particular
	// order. The caller owns the map and its slices.
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
	// Seq counts the beats of this life; it changes on every Beat.
	Seq int64
	// Age is the time since the last beat (or the registration), by the
	// store's clock, when List read it.
	Age time.Duration
	// BusDown is how long the node has been reporting, with each beat,
	// that it cannot reach the message bus, by the store's clock; 0 if it
	// reaches it, or if the store is not a [BusReporter].
	BusDown time.Duration
}

// ErrEvicted is returned by Beat when the node's record is gone or
// belongs to another epoch: peers evicted this node (or it was
// re-registered). The node must stop serving; to serve again it registers
// a new epoch. Retrying Beat is pointless.
var ErrEvicted = errors.New("heartbeat: this node's record is gone: it was evicted; stop serving and register again")

// ErrClosed is returned by a store used after its Close, and by
// [Monitor.Join] after [Monitor.Leave]. Retrying is pointless.
var ErrClosed = errors.New("heartbeat: closed")

package heartbeat

import (
	"context"
	"errors"
	"time"
)

// Store holds one membership record per live node and the names of each
// node's durable queues. Times are by the store's clock; each write to a
// record is one conditional operation. Implementations are safe for
// concurrent use, change nothing when ctx is done (returning an error
// matching ctx's), and pass heartbeat/storetest.
type Store interface {
	// Register creates or replaces node's record: a new epoch, sequence
	// 0, a beat stamped now, the bus up. An epoch is the store's time of
	// the registration in microseconds since the Unix epoch, or the
	// previous epoch plus one if that is larger (Record.RegisteredAt).
	Register(ctx context.Context, node string) (epoch int64, err error)

	// Beat stamps node's record now and increments its sequence, if it
	// has this epoch; else it changes nothing and fails with [ErrEvicted].
	Beat(ctx context.Context, node string, epoch int64) error

	// BeatBus is Beat that also records busUp: the first false stamps the
	// start of the outage, later ones keep it, true clears it.
	BeatBus(ctx context.Context, node string, epoch int64, busUp bool) error

	// List returns every record, in no order. The caller owns the slice.
	List(ctx context.Context) ([]Record, error)

	// Evict deletes node's record if it has this epoch and sequence, and
	// reports whether this call deleted it.
	Evict(ctx context.Context, node string, epoch, seq int64) (bool, error)

	// Deregister deletes node's record if it has this epoch; a record
	// already gone is no error.
	Deregister(ctx context.Context, node string, epoch int64) error

	// StoreTime reads the clock that stamps beats, in one round trip, and
	// returns its resolution (at most a millisecond).
	StoreTime(ctx context.Context) (now time.Time, resolution time.Duration, err error)

	// AddQueues records queues as node's; names compare byte for byte,
	// and outlive node's record. Adding one again is a no-op.
	AddQueues(ctx context.Context, node string, queues []string) error

	// Queues returns every recorded queue by node, each once. The caller
	// owns the map and slices.
	Queues(ctx context.Context) (map[string][]string, error)

	// RemoveQueues forgets queues of node; unknown names are ignored.
	RemoveQueues(ctx context.Context, node string, queues []string) error
}

// Record is one node's membership record as [Store.List] saw it.
type Record struct {
	// Node is the node's canonical UUID.
	Node string
	// Epoch identifies this life of the node.
	Epoch int64
	// Seq counts the beats of this life.
	Seq int64
	// Age is the time since the last beat or the registration.
	Age time.Duration
	// BusDown is how long the node has reported its bus down; 0 if up.
	BusDown time.Duration
}

// RegisteredAt returns when the node registered this life, by the
// store's clock, read from its epoch (see [Store.Register]): exact but
// when the store's clock went back or registrations came faster than one
// a microsecond.
func (r Record) RegisteredAt() time.Time { return time.UnixMicro(r.Epoch) }

// ErrEvicted means this node's record is gone or has another epoch: the
// node must stop serving, and may register again. Retrying is pointless.
var ErrEvicted = errors.New("heartbeat: this node's record is gone: it was evicted; stop serving and register again")

// ErrClosed is returned by a store after its Close, and by [Monitor.Join]
// after [Monitor.Leave]. Retrying is pointless.
var ErrClosed = errors.New("heartbeat: closed")

package heartbeat

import (
	"fmt"
	"strconv"
)

// EventKind says what happened to a membership record.
type EventKind uint8

const (
	// Joined: a record appeared: a new node, or a new epoch of a known node
	// (then it follows the Left of the old epoch in the same round).
	Joined EventKind = iota + 1
	// Left: a record vanished (a goodbye, or an eviction by another node),
	// or was replaced by a newer epoch of the same node (Left for the old
	// epoch first, then Joined for the new one). The node that evicted the
	// record broadcasts the leave; a Left needs no broadcast.
	Left
	// Evicted: this monitor evicted the record, and the store confirmed
	// that this monitor's delete was the one that removed it. Exactly one
	// monitor gets Evicted for a record; the others see Left. The node
	// should broadcast the leave. Evicted replaces Left for that record.
	Evicted
	// SelfEvicted: this node's own record is gone or has another epoch:
	// peers evicted it (or another process registered the same node
	// UUID). The node must stop serving at once; [Monitor.Run] returns an
	// error matching [ErrEvicted] right after this event.
	SelfEvicted
)

// String returns the kind's name, or "EventKind(n)" for an unknown value.
func (k EventKind) String() string {
	switch k {
	case Joined:
		return "Joined"
	case Left:
		return "Left"
	case Evicted:
		return "Evicted"
	case SelfEvicted:
		return "SelfEvicted"
	default:
		return "EventKind(" + strconv.Itoa(int(k)) + ")"
	}
}

// Event is one membership change seen by a [Monitor].
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// Record is the record concerned: for Joined the new record as
	// listed; for Left the last record this monitor listed before it
	// vanished; for Evicted the stale record as listed and deleted; for
	// SelfEvicted this node's last listed record (at least its Node and
	// Epoch).
	Record Record
}

// String formats e as "Kind node epoch N", for logs and examples.
func (e Event) String() string {
	return fmt.Sprintf("%s %s epoch %d", e.Kind, e.Record.Node, e.Record.Epoch)
}

// Listener receives the membership events of a [Monitor].
//
// HeartbeatEvent is called from the goroutine running [Monitor.Run], one
// event at a time, in order: within one round Left and Evicted events
// come before Joined events, each group sorted by node. The monitor's
// next beat waits for the listener, so HeartbeatEvent must not block for
// long (a listener that stalls for EvictAfter gets its own node
// evicted): hand slow work, such as broadcasting a leave, to another
// goroutine. It may call [Monitor.Members], [Monitor.Epoch] and
// [Monitor.LastBeat] (Members already reflects the round being
// reported), but must not call [Monitor.Leave], which waits for Run to
// return. The Event may be kept.
type Listener interface {
	// HeartbeatEvent reports one membership change.
	HeartbeatEvent(Event)
}

// ListenerFunc adapts a function to a [Listener].
type ListenerFunc func(Event)

// HeartbeatEvent calls f(e).
func (f ListenerFunc) HeartbeatEvent(e Event) { f(e) }

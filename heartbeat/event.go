package heartbeat

import (
	"fmt"
	"strconv"
)

// EventKind says what happened to a membership record.
type EventKind uint8

const (
	// Joined: a record of a new node or a new epoch appeared.
	Joined EventKind = iota + 1
	// Left: a record vanished or was replaced by a new epoch.
	Left
	// Evicted: this monitor's Evict removed the record (instead of Left);
	// the node should broadcast the leave.
	Evicted
	// SelfEvicted: this node's record is gone; it must stop serving.
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
	// Record is the record as this monitor last listed it.
	Record Record
}

// String formats e as "Kind node epoch N".
func (e Event) String() string {
	return fmt.Sprintf("%s %s epoch %d", e.Kind, e.Record.Node, e.Record.Epoch)
}

// Listener receives a [Monitor]'s events in Run's goroutine, one at a
// time: per round Left and Evicted, then Joined, each by node. It must
// not block for long nor call Leave; it may keep the Event.
type Listener interface {
	// HeartbeatEvent reports one membership change.
	HeartbeatEvent(Event)
}

// ListenerFunc adapts a function to a [Listener].
type ListenerFunc func(Event)

// HeartbeatEvent calls f(e).
func (f ListenerFunc) HeartbeatEvent(e Event) { f(e) }

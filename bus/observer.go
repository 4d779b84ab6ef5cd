package bus

import (
	"fmt"
	"time"
)

// Observer sees what the bus does, so metrics and traces can be added
// without touching it (bus imports no metrics library).
//
// Observe is called synchronously on the send and receive paths, possibly
// from many goroutines at once: it must be safe for concurrent use, must
// not block, and must not keep the Observation's Err beyond the call if it
// mutates it (it should not).
type Observer interface {
	// Observe records one observation.
	Observe(Observation)
}

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(Observation)

// Observe calls f(o).
func (f ObserverFunc) Observe(o Observation) { f(o) }

// Op names what an [Observation] records.
type Op uint8

// The observed operations.
const (
	// OpSend: a one-way message was published (Err if it failed).
	OpSend Op = iota + 1
	// OpCall: a call completed; Duration is the round trip.
	OpCall
	// OpBroadcast: an event was published to the fan-out.
	OpBroadcast
	// OpHandle: a handler finished; Duration is its run time, Queued the
	// time the message waited on this node before it ran.
	OpHandle
	// OpReply: a reply was published (Err if publishing failed).
	OpReply
	// OpEvent: a subscriber received a broadcast event.
	OpEvent
	// OpLateReply: a reply arrived for a call that had already ended
	// (timed out, canceled, abandoned); it was dropped.
	OpLateReply
	// OpReject: a delivery was refused before any handler ran: undecodable,
	// unknown type, busy, or its sender's deadline had passed. Err says why.
	OpReject
)

// String returns the operation's name, or "Op(n)" for an unknown value.
func (o Op) String() string {
	switch o {
	case OpSend:
		return "send"
	case OpCall:
		return "call"
	case OpBroadcast:
		return "broadcast"
	case OpHandle:
		return "handle"
	case OpReply:
		return "reply"
	case OpEvent:
		return "event"
	case OpLateReply:
		return "late-reply"
	case OpReject:
		return "reject"
	default:
		return fmt.Sprintf("Op(%d)", uint8(o))
	}
}

// Observation is one thing the bus did.
type Observation struct {
	// Op is what happened.
	Op Op
	// Type is the message type name, when known.
	Type string
	// ServiceID is the target service id (for events, empty).
	ServiceID string
	// Duration is the latency of the operation (see each Op).
	Duration time.Duration
	// Queued is, for OpHandle, the time the message waited on this node.
	Queued time.Duration
	// Err is the error, if the operation failed.
	Err error
}

func (b *CloudBus) observe(o Observation) {
	if b.obs != nil {
		b.obs.Observe(o)
	}
}

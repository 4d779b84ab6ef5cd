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
	// unknown type, busy, its sender's deadline had passed (Err matches
	// message.ErrTimeout), or the transport no longer held it (a
	// Delivery.Check said so). Err says why.
	OpReject
	// OpRelease: a delivery was given back to its queue unanswered: its
	// handler returned ErrRelease, or its reply could not be published.
	OpRelease
	// OpRetry: a one-way message whose handler failed (Err) is given
	// back to its queue for another attempt, after a pause.
	OpRetry
	// OpDeadLetter: a one-way message was moved to the dead-letter
	// queue: its attempts were spent or its deadline passed (Err says
	// the last failure).
	OpDeadLetter
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
	case OpRelease:
		return "release"
	case OpRetry:
		return "retry"
	case OpDeadLetter:
		return "dead-letter"
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
	// ID is the envelope id of the message handled, refused, released or
	// replied to (OpHandle, OpReject, OpRelease, OpReply).
	ID string
	// Resource is the resource the message is about, if any.
	Resource string
	// Headers are the message's headers (OpHandle, OpReject, OpRelease);
	// read-only.
	Headers map[string]string
	// Start is when the handler started (OpHandle, OpRelease), when the
	// message was refused (OpReject), or when the reply was published
	// (OpReply), on this process's clock.
	Start time.Time
	// Deadline is the message's deadline on this process's clock (zero if
	// it has none), for OpHandle, OpReject and OpRelease.
	Deadline time.Time
	// Err is the error, if the operation failed.
	Err error
}

func (b *CloudBus) observe(o Observation) {
	if b.obs != nil {
		b.obs.Observe(o)
	}
}

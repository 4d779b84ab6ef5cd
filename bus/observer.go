package bus

import (
	"fmt"
	"time"
)

// Observer sees what the bus does, for metrics and traces. Observe is
// called on the send and receive paths, from many goroutines at once: it
// must be safe for concurrent use and must not block.
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
	// OpSend: a one-way message was published.
	OpSend Op = iota + 1
	// OpCall: a call ended; Duration is the round trip.
	OpCall
	// OpBroadcast: an event was published.
	OpBroadcast
	// OpHandle: a handler returned; Duration is its run, Queued its wait.
	OpHandle
	// OpReply: a reply was published.
	OpReply
	// OpEvent: subscribers received an event.
	OpEvent
	// OpLateReply: a reply came after its call ended and was dropped.
	OpLateReply
	// OpReject: a delivery was refused before a handler ran; Err says why
	// (message.ErrTimeout if it was late).
	OpReject
	// OpRelease: a delivery was given back unanswered.
	OpRelease
	// OpRetry: a failed one-way message was given back for another
	// attempt.
	OpRetry
	// OpDeadLetter: a one-way message was dead-lettered; Err is its last
	// failure.
	OpDeadLetter
	// OpReroute: a message about a resource was sent again, to the
	// resource's owner by the sender's ring, after its attempt failed
	// with Err (not_owner, no_route or node_left). The service layer
	// (service.Call, service.Send and the API portal) reports it, not
	// the bus: ServiceID is the target the failed attempt went to.
	OpReroute
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
	case OpReroute:
		return "reroute"
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
	// ServiceID is the target service id; empty for events.
	ServiceID string
	// Duration is the operation's latency (see each Op).
	Duration time.Duration
	// Queued is, for OpHandle, how long the message waited on this node.
	Queued time.Duration
	// ID is the message id (OpHandle, OpReject, OpRelease, OpReply).
	ID string
	// Resource is the resource the message is about, if any.
	Resource string
	// Headers are the message's headers (OpHandle, OpReject, OpRelease);
	// read-only.
	Headers map[string]string
	// Start is when the handler started, the message was refused or the
	// reply published, on this process's clock.
	Start time.Time
	// Deadline is the message's deadline on this process's clock, or zero
	// (OpHandle, OpReject, OpRelease).
	Deadline time.Time
	// Err is the error, if the operation failed.
	Err error
	// Forward is true for a send or call that passes on a message this
	// node received rather than one it made (as [SpanInfo.Forward]): the
	// API portal's forwards (OpCall, Duration the round trip) and
	// messages forwarded to their owner (OpSend, Duration the publish,
	// whatever the message's kind: the reply, if any, goes to its
	// original caller).
	Forward bool
}

func (b *CloudBus) observe(o Observation) {
	if b.obs != nil {
		b.obs.Observe(o)
	}
}

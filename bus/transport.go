package bus

import (
	"context"
	"strconv"
)

// Transport is the broker under the bus: named queues, publishing to a
// queue, consuming with acknowledgements, and a fan-out for broadcasts.
// The bus builds every routing rule on these few operations, so any
// broker that provides them can carry a cloud bus. Implementations live in
// subpackages (bus/membus, bus/amqpbus) so importing bus pulls in no
// broker client, and they prove conformance by running bus/bustest.
//
// All methods are safe for concurrent use. Every method that blocks takes
// a ctx and returns when it is done. After Close, or after the transport
// was killed, every method fails with an error matching message.ErrClosed
// or message.ErrUnavailable.
type Transport interface {
	// DeclareQueue creates the named queue if it does not exist; declaring
	// an existing queue again is a no-op. The options say whether the queue
	// outlives its declarer and whether it is bound to a fan-out.
	DeclareQueue(ctx context.Context, name string, opts QueueOptions) error

	// DeleteQueue deletes the named queue and the messages in it; its
	// consumers stop. Deleting a queue that does not exist is a no-op.
	DeleteQueue(ctx context.Context, name string) error

	// Publish puts one message into the named queue. If the queue does not
	// exist it fails promptly (well within a second) with an error matching
	// message.ErrNoRoute, never with a timeout. A queue whose consumers
	// died still exists: the message waits there. Publish never blocks
	// past ctx's deadline. The transport does not keep data.
	Publish(ctx context.Context, queue string, data []byte) error

	// Broadcast puts one copy of the message into every queue bound to the
	// named fan-out. A fan-out with no queues drops the message without
	// error.
	Broadcast(ctx context.Context, fanout string, data []byte) error

	// Consume starts delivering the queue's messages to handle, one call at
	// a time per consumer, in queue order. At most opts.Prefetch deliveries
	// are unacknowledged at once; further messages stay in the queue, where
	// competing consumers may take them. A delivery that is never
	// acknowledged before its consumer stops (Cancel, Close, a crash) goes
	// back to the queue and is redelivered with Redelivered set. handle
	// must not block for long: hand work off and acknowledge later.
	// Consuming a queue that does not exist fails with message.ErrNoRoute.
	Consume(ctx context.Context, queue string, opts ConsumeOptions, handle func(Delivery)) (Consumer, error)

	// Close stops every consumer, deletes the transport's temporary queues
	// and releases the connection. It is idempotent and waits until no
	// handle call is running.
	Close() error
}

// EntryTransport is implemented by a [Transport] that can put a queue
// behind a named entry (a RabbitMQ direct exchange) and publish through
// it, so that a broker user may be allowed to publish to that entry and
// nothing else. The bus puts api.portal behind the entry "<prefix>.api"
// ([CloudBus.apiEntry]) and sends every API message through it; a client
// then needs no right to publish to any queue (see the README's broker
// permissions).
type EntryTransport interface {
	// DeclareEntry creates the named entry if it does not exist and binds
	// queue to it, keyed by the queue's name. Declaring again is a no-op.
	DeclareEntry(ctx context.Context, entry, queue string) error
	// PublishVia puts one message into queue through entry, like Publish:
	// a queue not bound to the entry fails with message.ErrNoRoute. An
	// entry that does not exist (no node declared it yet) fails with
	// message.ErrNoRoute or, where the broker ends the channel for it,
	// message.ErrUnavailable.
	PublishVia(ctx context.Context, entry, queue string, data []byte) error
}

// QueueKind says how long a queue lives.
type QueueKind uint8

const (
	// QueueDurable outlives its declarer: a node that crashes leaves its
	// service queues, with their messages, for a successor to drain.
	// Service queues and the shared api.portal queue are durable.
	QueueDurable QueueKind = iota + 1
	// QueueTemporary is deleted when the transport that declared it closes
	// or dies. Reply and event queues are temporary: nobody is left to
	// read them.
	QueueTemporary
)

// String returns "durable", "temporary" or "QueueKind(n)".
func (k QueueKind) String() string {
	switch k {
	case QueueDurable:
		return "durable"
	case QueueTemporary:
		return "temporary"
	default:
		return "QueueKind(" + strconv.Itoa(int(k)) + ")"
	}
}

// QueueOptions configure [Transport.DeclareQueue].
type QueueOptions struct {
	// Kind is QueueDurable or QueueTemporary; required.
	Kind QueueKind
	// Fanout, if set, binds the queue to the named fan-out, so that it
	// receives a copy of every [Transport.Broadcast] to it.
	Fanout string
	// MaxDeliveries, if positive, bounds how many times a message of this
	// queue is handed to a consumer without being acknowledged (its
	// consumer crashed, or gave it back): instead of an extra delivery it
	// is moved to DeadLetter, with HeaderDeadReason and HeaderDeadQueue
	// set, so a poison message cannot circle forever while the others
	// keep flowing.
	MaxDeliveries int
	// DeadLetter names the existing queue poison messages are moved to;
	// required when MaxDeliveries is positive.
	DeadLetter string
}

// Headers a transport sets on a message it moved to a dead-letter queue
// or gave back for another attempt, read with [Delivery.Header].
const (
	// HeaderDeadReason says why the message was dead-lettered.
	HeaderDeadReason = "x-cloudbus-dead-reason"
	// HeaderDeadQueue names the queue the message was taken from.
	HeaderDeadQueue = "x-cloudbus-dead-queue"
	// HeaderAttempts counts the handler runs of a one-way message that
	// failed and was given back for another attempt ([Delivery.Retry]);
	// absent before the first failure.
	HeaderAttempts = "x-cloudbus-attempts"
)

// ConsumeOptions configure [Transport.Consume].
type ConsumeOptions struct {
	// Prefetch bounds the unacknowledged deliveries of this consumer;
	// values below 1 mean 1.
	Prefetch int
}

// Delivery is one message handed to a consumer. Exactly one of Ack,
// Reject, Retry, DeadLetter (and Release, for a [Releaser]) settles it,
// once; later calls are no-ops returning nil. They may be called from any
// goroutine.
type Delivery interface {
	// Body returns the message bytes. The bus does not modify them.
	Body() []byte
	// Redelivered reports whether the message was delivered before and not
	// acknowledged (its previous consumer stopped or crashed).
	Redelivered() bool
	// Header returns a transport header of the message, such as
	// HeaderDeadReason on a dead-lettered one, or "".
	Header(key string) string
	// Ack removes the message from its queue.
	Ack() error
	// Reject removes the message, or with requeue puts it back at the head
	// of the queue for redelivery.
	Reject(requeue bool) error
	// Retry gives the message back to its queue for another attempt after
	// its handler failed: unlike Reject(true) it does not count towards
	// QueueOptions.MaxDeliveries, and the message then carries
	// HeaderAttempts = attempts. It goes to any consumer of the queue,
	// possibly at its tail. If it cannot be given back so, the delivery
	// is rejected for redelivery instead and the error says so.
	Retry(attempts int) error
	// DeadLetter moves the message to the queue named dead, with
	// HeaderDeadReason = reason and HeaderDeadQueue = the queue it came
	// from, and removes it from its own queue. If it cannot be moved (the
	// dead-letter queue is missing, the broker is unreachable), the
	// delivery is rejected for redelivery instead and the error says so:
	// a message is never lost for want of a dead-letter queue.
	DeadLetter(dead, reason string) error
}

// DeliveryChecker is implemented by a [Delivery] whose transport can
// lose it before it is settled: the broker hands an unacknowledged
// delivery to another consumer once its connection closes, and a
// process paused long enough (SIGSTOP, a VM freeze) may not notice until
// after it read the delivery. The bus calls Check just before the
// handler would start.
//
// Check returns nil if the delivery is still this consumer's: its
// connection is up and, if the process may have been paused since the
// delivery arrived, the broker answered a round trip sent after the
// pause. Otherwise it returns an error (bounded by ctx): then the bus
// neither runs nor settles the delivery, since the broker has requeued
// it for another consumer. Check may block for a round trip to the
// broker; it is safe for concurrent use.
type DeliveryChecker interface {
	// Check reports whether the delivery is still held; see the type.
	Check(ctx context.Context) error
}

// Releaser is implemented by a [Delivery] that can be given back to its
// queue without counting as a failed delivery: unlike Reject(true), a
// release does not count towards QueueOptions.MaxDeliveries, because the
// consumer did not crash on the message, it could not finish it (its
// reply could not be published, or its handler returned [ErrRelease]).
// The message goes to any consumer of the queue, possibly at its tail.
// Release is settling: after it, Ack and Reject are no-ops.
type Releaser interface {
	// Release gives the delivery back; see the type.
	Release() error
}

// IdleDeleter is implemented by a [Transport] that can delete a queue
// only if it is idle: no message in it (ready or delivered and not yet
// acknowledged) and no consumer. The bus uses it when it empties the
// queue of a node that died or left ([CloudBus.reroute]), so that no
// message that arrived meanwhile is deleted with the queue, and a node
// that came back and consumes its queue again keeps it.
type IdleDeleter interface {
	// DeleteQueueIfIdle deletes the queue if it is idle. A queue that
	// holds a message or has a consumer is left alone, with an error
	// matching message.ErrBusy; a queue that does not exist is not an
	// error.
	DeleteQueueIfIdle(ctx context.Context, name string) error
}

// Consumer is a running consumption started by [Transport.Consume].
type Consumer interface {
	// Cancel stops delivery; unacknowledged deliveries go back to the
	// queue. It is idempotent and waits until no handle call is running.
	Cancel() error
}

// Aborter is implemented by a [Consumer] that can stop at once, giving
// back every delivery it holds unsettled in the same step as it leaves
// the queue: a later settlement of one of them does nothing. The bus's
// Close uses it (Shutdown cancels, to let running handlers acknowledge),
// so that no moment exists where the queue has no consumer while this one
// still holds deliveries it will give back: a survivor deleting the queue
// of an evicted node as idle then would lose them. A transport whose
// DeleteQueueIfIdle counts such deliveries (bus/membus) needs none; the
// fallback is Cancel.
type Aborter interface {
	// Abort stops the consumer; see the type. It waits until no handle
	// call is running.
	Abort() error
}

// TransportState is the connection state of a transport that can lose its
// broker and recover (see [StateWatcher]).
type TransportState uint8

// The transport states.
const (
	// TransportConnected: connected; publishing and consuming work.
	TransportConnected TransportState = iota + 1
	// TransportReconnecting: the connection dropped; the transport is
	// reconnecting with backoff. Operations fail with
	// message.ErrUnavailable until it is back.
	TransportReconnecting
	// TransportClosed: Close was called.
	TransportClosed
)

// String returns "connected", "reconnecting", "closed" or
// "TransportState(n)".
func (s TransportState) String() string {
	switch s {
	case TransportConnected:
		return "connected"
	case TransportReconnecting:
		return "reconnecting"
	case TransportClosed:
		return "closed"
	default:
		return "TransportState(" + strconv.Itoa(int(s)) + ")"
	}
}

// StateWatcher is implemented by a transport whose connection can drop
// and recover, such as bus/amqpbus. The bus uses it to end calls in
// flight at once when the connection drops (their replies would be lost
// with the reply queue) and the node reports the state.
type StateWatcher interface {
	// TransportState returns the current state.
	TransportState() TransportState
	// WatchState calls f with every later state change, in order, from a
	// goroutine of the transport; f must not block. stop ends the calls;
	// after it returns f is not called again.
	WatchState(f func(TransportState)) (stop func())
}

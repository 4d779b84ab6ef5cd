// Package driver is the contract between package bus and a message
// broker: named queues, publishing, consuming with acknowledgements and a
// fan-out for broadcasts. Users of the bus never import it; a transport
// (bus/membus, bus/amqpbus, or your own) implements [Transport] and proves
// it with the conformance suite in bus/bustest.
package driver

import (
	"context"
	"strconv"
)

// Transport is the broker under the bus: named queues, publishing to a
// queue, consuming with acknowledgements, and a fan-out for broadcasts.
// The bus builds every routing rule on these operations, so any broker
// that provides them can carry a cloud bus. Implementations live in
// subpackages (bus/membus, bus/amqpbus) so importing bus pulls in no
// broker client, and they prove conformance by running bus/bustest.
//
// All methods are safe for concurrent use. Every method that blocks takes
// a ctx and returns when it is done. After Close, or after the transport
// was killed, every method but State, WatchState and Close fails with an
// error matching message.ErrClosed or message.ErrUnavailable.
type Transport interface {
	// DeclareQueue creates the named queue if it does not exist; declaring
	// an existing queue again is a no-op. The options say whether the queue
	// outlives its declarer and whether it is bound to a fan-out.
	DeclareQueue(ctx context.Context, name string, opts QueueOptions) error

	// DeleteQueue deletes the named queue and the messages in it; its
	// consumers stop. Deleting a queue that does not exist is a no-op.
	DeleteQueue(ctx context.Context, name string) error

	// DeleteQueueIfIdle deletes the named queue only if it is idle: no
	// ready message and no consumer, checked and deleted in one step. A
	// queue that is not idle is left alone, with an error matching
	// message.ErrBusy; a queue that does not exist is not an error.
	// Deliveries still held by a cancelled consumer need not count (on
	// RabbitMQ they do not), so a consumer that will give deliveries back
	// stops with [Consumer.Abort].
	DeleteQueueIfIdle(ctx context.Context, name string) error

	// DeclareEntry creates the named entry if it does not exist and binds
	// queue to it, keyed by the queue's name; declaring again is a no-op.
	// An entry is the one thing a broker user may be allowed to publish to
	// (on RabbitMQ a direct exchange): a client that publishes only through
	// it reaches the queues bound to it and nothing else. The queue must
	// exist.
	DeclareEntry(ctx context.Context, entry, queue string) error

	// Publish puts one message into the named queue. If the queue does not
	// exist it fails promptly (well within a second) with an error matching
	// message.ErrNoRoute, never with a timeout. A queue whose consumers
	// died still exists: the message waits there. Publish never blocks
	// past ctx's deadline. The transport does not keep data.
	Publish(ctx context.Context, queue string, data []byte) error

	// PublishVia puts one message into queue through entry, like Publish:
	// a queue not bound to the entry fails with message.ErrNoRoute. An
	// entry that does not exist fails with message.ErrNoRoute or, where
	// the broker ends the channel for it, message.ErrUnavailable.
	PublishVia(ctx context.Context, entry, queue string, data []byte) error

	// Broadcast puts one copy of the message into every queue bound to the
	// named fan-out. A fan-out with no queues drops the message without
	// error.
	Broadcast(ctx context.Context, fanout string, data []byte) error

	// Consume starts delivering the queue's messages to handle, one call at
	// a time per consumer, in queue order. At most opts.Prefetch deliveries
	// are unacknowledged at once; further messages stay in the queue, where
	// competing consumers may take them. A delivery that is never
	// acknowledged before its consumer stops (Cancel, Abort, Close, a
	// crash) goes back to the queue and is redelivered with Redelivered
	// set. handle must not block for long: hand work off and acknowledge
	// later. Consuming a queue that does not exist fails with
	// message.ErrNoRoute.
	Consume(ctx context.Context, queue string, opts ConsumeOptions, handle func(Delivery)) (Consumer, error)

	// State returns the connection state: TransportConnected while
	// operations can reach the broker, TransportReconnecting while they
	// fail with message.ErrUnavailable and the transport is recovering,
	// TransportClosed after Close or a kill. A transport that cannot lose
	// its broker reports TransportConnected until it closes.
	State() TransportState

	// WatchState calls f with every later change of State, in order, one
	// call at a time, on any goroutine; f must not block and must not call
	// stop. stop ends the calls: after it returns, f is
	// not called again. stop is idempotent.
	WatchState(f func(TransportState)) (stop func())

	// Close stops every consumer, deletes the transport's temporary queues
	// and releases the connection. It is idempotent and waits until no
	// handle call is running.
	Close() error
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
// Reject, Retry, Release and DeadLetter settles it, once; later calls are
// no-ops returning nil. All methods may be called from any goroutine.
type Delivery interface {
	// Body returns the message bytes. The bus does not modify them.
	Body() []byte
	// Redelivered reports whether the message was delivered before and not
	// acknowledged (its previous consumer stopped or crashed).
	Redelivered() bool
	// Header returns a transport header of the message, such as
	// HeaderDeadReason on a dead-lettered one, or "".
	Header(key string) string
	// Check returns nil if this consumer still holds the unsettled
	// delivery: its connection is up and, if the process may have been
	// paused since the delivery arrived (SIGSTOP, a frozen VM), the broker
	// answered a round trip sent after the pause. Otherwise it returns an
	// error matching message.ErrUnavailable or message.ErrClosed, or one
	// for ctx ending first: the broker has requeued the delivery, or will,
	// for another consumer, so the caller neither runs nor settles it.
	// Check may block for a round trip to the broker.
	Check(ctx context.Context) error
	// Ack removes the message from its queue.
	Ack() error
	// Reject removes the message, or with requeue puts it back at the head
	// of the queue for redelivery; a requeue counts towards
	// QueueOptions.MaxDeliveries.
	Reject(requeue bool) error
	// Retry gives the message back to its queue for another attempt after
	// its handler failed: unlike Reject(true) it does not count towards
	// QueueOptions.MaxDeliveries, and the message then carries
	// HeaderAttempts = attempts. It goes to any consumer of the queue,
	// possibly at its tail. If it cannot be given back so, the delivery
	// is rejected for redelivery instead and the error says so.
	Retry(attempts int) error
	// Release gives the message back to its queue unfinished (its reply
	// could not be published, or its handler returned bus.ErrRelease): like
	// Retry it does not count towards QueueOptions.MaxDeliveries, and it
	// leaves HeaderAttempts as it was. If it cannot be given back so, the
	// delivery is rejected for redelivery instead and the error says so.
	Release() error
	// DeadLetter moves the message to the queue named dead, with
	// HeaderDeadReason = reason and HeaderDeadQueue = the queue it came
	// from, and removes it from its own queue. If it cannot be moved (the
	// dead-letter queue is missing, the broker is unreachable), the
	// delivery is rejected for redelivery instead and the error says so:
	// a message is never lost for want of a dead-letter queue.
	DeadLetter(dead, reason string) error
}

// Consumer is a running consumption started by [Transport.Consume]. Once
// it is stopped by Cancel or Abort, further calls of either only wait.
// Neither may be called from the consumer's own handle function.
type Consumer interface {
	// Cancel stops delivery; deliveries handed over stay this consumer's
	// and may still be settled. It waits until no handle call is running.
	Cancel() error
	// Abort stops delivery and, in the same step as the consumer leaves
	// the queue, gives every delivery it holds unsettled back to the
	// queue, as a crash would; a later settlement of one of them has no
	// effect. So the queue never has no consumer while this one still
	// holds deliveries, and a DeleteQueueIfIdle elsewhere cannot delete
	// them with the queue. It waits until no handle call is running.
	Abort() error
}

// TransportState is the connection state of a transport, reported by
// [Transport.State] and [Transport.WatchState].
type TransportState uint8

// The transport states.
const (
	// TransportConnected: connected; publishing and consuming work.
	TransportConnected TransportState = iota + 1
	// TransportReconnecting: the connection dropped; the transport is
	// reconnecting with backoff. Operations fail with
	// message.ErrUnavailable until it is back.
	TransportReconnecting
	// TransportClosed: Close was called, or the transport was killed.
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

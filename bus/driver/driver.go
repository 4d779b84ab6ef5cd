// Package driver is the broker contract of package bus, for transport
// authors; bus/bustest checks it.
package driver

import (
	"context"
	"strconv"
)

// Transport is a broker connection, safe for concurrent use; blocking
// methods honour ctx. Redeclaring, or deleting what is missing, is no
// error; a missing queue fails Publish, PublishVia and Consume promptly
// with message.ErrNoRoute. After Close or a kill, methods but State,
// WatchState and Close fail with message.ErrClosed or
// message.ErrUnavailable.
type Transport interface {
	// DeclareQueue creates a queue.
	DeclareQueue(ctx context.Context, name string, opts QueueOptions) error

	// DeleteQueue deletes a queue, its messages and consumers.
	DeleteQueue(ctx context.Context, name string) error

	// DeleteQueueIfIdle deletes a queue only if, in the same step, it has
	// no ready message and no consumer (a cancelled consumer's deliveries
	// need not count); else message.ErrBusy.
	DeleteQueueIfIdle(ctx context.Context, name string) error

	// DeclareEntry binds the existing queue to entry, creating it; an
	// entry reaches only its queues.
	DeclareEntry(ctx context.Context, entry, queue string) error

	// Publish puts a message into the queue without keeping data.
	Publish(ctx context.Context, queue string, data []byte) error

	// PublishVia publishes through entry; an unbound queue is missing, and
	// a missing entry may also give message.ErrUnavailable.
	PublishVia(ctx context.Context, entry, queue string, data []byte) error

	// Broadcast puts a copy into each queue bound to the fan-out.
	Broadcast(ctx context.Context, fanout string, data []byte) error

	// Consume hands the queue's messages to handle, one call at a time in
	// order, at most opts.Prefetch unsettled; handle must not block long.
	// Deliveries unsettled when it stops are redelivered.
	Consume(ctx context.Context, queue string, opts ConsumeOptions, handle func(Delivery)) (Consumer, error)

	// State returns the connection state.
	State() TransportState

	// WatchState calls f with each later State, in order, one call at a
	// time; f must not block or call the idempotent stop, after which f is
	// not called.
	WatchState(f func(TransportState)) (stop func())

	// Close, idempotent, stops consumers, deletes temporary queues and
	// waits for handle calls.
	Close() error
}

// QueueForgetter is implemented by a [Transport] that declares its
// queues again after it reconnects. ForgetQueue stops that for one queue,
// without deleting it: package bus calls it for its services' queues when
// a bus closes, so a reconnect does not bring back a queue that nobody
// on this transport consumes any more and that other processes may have
// deleted meanwhile (the queues of a node evicted while it was cut from
// the broker, which survivors drained and deleted). A later DeclareQueue
// of the name declares it again.
type QueueForgetter interface {
	// ForgetQueue stops declaring name again after a reconnect.
	ForgetQueue(name string)
}

// ConsumerCounter is implemented by a [Transport] that can tell how many
// consumers a queue has, from any process: the broker drops a process's
// consumers as soon as its connection closes (the process exited or was
// killed), while a process merely cut off keeps them until the broker
// gives up on its connection. Package service uses it to confirm that a
// node whose database session ended is dead.
type ConsumerCounter interface {
	// Consumers returns the number of consumers of queue; a missing
	// queue fails with an error matching message.ErrNoRoute.
	Consumers(ctx context.Context, queue string) (int, error)
}

// MessageCounter is implemented by a [Transport] that can tell how many
// messages wait in a queue: ready ones, not those delivered to a consumer
// and not yet settled. Package bus uses it to read its dead-letter queue
// to its end without removing anything (bus.CloudBus.DeadLetters).
type MessageCounter interface {
	// Messages returns the number of ready messages of queue; a missing
	// queue fails with an error matching message.ErrNoRoute.
	Messages(ctx context.Context, queue string) (int, error)
}

// PublishStarter is implemented by a [Transport] whose Publish and
// PublishVia wait for the broker's confirmation. Package bus uses it to
// publish a call's request: the call's reply can come back before the
// broker confirms the request (RabbitMQ confirms a persistent message
// once it is on disk, or once a consumer acknowledged it), and a reply
// proves that the request arrived, so the call ends with its reply
// without that wait. With a transport without it, a call waits for
// Publish or PublishVia to return before it waits for its reply.
type PublishStarter interface {
	// StartPublish publishes as Publish (entry "") or PublishVia would,
	// without waiting for the outcome: the returned channel receives
	// their error exactly once (nil once the broker confirmed the
	// message). ctx bounds the publish as it bounds Publish; data must
	// not change until the outcome arrived. The caller may stop
	// listening at any time.
	StartPublish(ctx context.Context, entry, queue string, data []byte) <-chan error
}

// FastPublisher is implemented by a [Transport] that can publish in the
// fast delivery mode: the message is not persisted, not checked for a
// route and not confirmed by the broker. Package bus uses it for the
// calls and one-way messages it sends in that mode, and for their
// replies; a transport without it publishes them as Publish and
// PublishVia do.
type FastPublisher interface {
	// PublishFast puts a message into queue, through entry unless entry
	// is "", and returns once it left this process (or failed to: then
	// nothing was sent, and the error matches message.ErrNotSent, or it
	// is ctx's). A missing queue, entry or binding drops the message
	// silently, as does a broker that loses it; the broker keeps it in
	// memory only, where the queue allows.
	PublishFast(ctx context.Context, entry, queue string, data []byte) error
}

// QueueKind is a queue's lifetime.
type QueueKind uint8

// The queue kinds.
const (
	// QueueDurable outlives its declarer.
	QueueDurable QueueKind = iota + 1
	// QueueTemporary dies with its declarer.
	QueueTemporary
)

// String names the kind.
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
	// Kind is required.
	Kind QueueKind
	// Fanout, if set, names the fan-out to bind.
	Fanout string
	// MaxDeliveries, if positive, bounds a message's unsettled deliveries
	// (crashes, Reject(true)), then moves it to DeadLetter.
	MaxDeliveries int
	// DeadLetter names an existing queue; required with MaxDeliveries.
	DeadLetter string
}

// Headers a transport sets, read with [Delivery.Header].
const (
	// HeaderDeadReason says why a message was dead-lettered.
	HeaderDeadReason = "x-cloudbus-dead-reason"
	// HeaderDeadQueue names the queue it left.
	HeaderDeadQueue = "x-cloudbus-dead-queue"
	// HeaderAttempts is [Delivery.Retry]'s attempts.
	HeaderAttempts = "x-cloudbus-attempts"
)

// ConsumeOptions configure [Transport.Consume].
type ConsumeOptions struct {
	// Prefetch bounds unsettled deliveries; below 1 means 1.
	Prefetch int
	// NonBlocking says that handle never blocks: it neither waits for
	// anything nor takes a lock a publisher may hold while it
	// publishes. A transport may then call it on the goroutine that
	// publishes the message, once the transport holds no lock of its
	// own, instead of handing the delivery to a goroutine of the
	// consumer (membus does, saving two goroutine switches per call);
	// calls to handle stay one at a time and in order. A transport that
	// cannot, or will not, ignores it.
	NonBlocking bool
}

// Delivery is a consumer's message, safe from any goroutine.
// The first of Ack, Reject, Retry, Release and DeadLetter settles it;
// later calls return nil. A failed Retry, Release or DeadLetter requeues
// it.
type Delivery interface {
	// Body returns the message bytes.
	Body() []byte
	// Redelivered reports an earlier unsettled delivery.
	Redelivered() bool
	// Header returns a header, or "".
	Header(key string) string
	// Check, which may block, returns nil if this consumer still holds
	// the delivery: connected and, after a process pause, answered by the
	// broker since; else message.ErrUnavailable, message.ErrClosed or
	// ctx's error, and the delivery must not run. After ctx's error
	// (the broker did not answer in time) this consumer may still hold
	// it: the bus settles it (refused as late, or released) rather than
	// keep it from every consumer until the channel closes.
	Check(ctx context.Context) error
	// Ack removes the message.
	Ack() error
	// Reject removes it or, with requeue, requeues it at the head,
	// counting towards MaxDeliveries.
	Reject(requeue bool) error
	// Retry requeues it, maybe at the tail, outside MaxDeliveries, with
	// HeaderAttempts = attempts.
	Retry(attempts int) error
	// Release is Retry keeping HeaderAttempts.
	Release() error
	// DeadLetter moves it to queue dead with the dead-letter headers.
	DeadLetter(dead, reason string) error
}

// Consumer is a running [Transport.Consume]. Cancel and Abort, never
// called from handle, wait for handle calls; later calls only wait.
type Consumer interface {
	// Cancel stops delivery; delivered messages stay settleable.
	Cancel() error
	// Abort stops delivery, requeueing unsettled deliveries as it
	// leaves the queue; later settlements do nothing. After Cancel it
	// requeues what is still unsettled.
	Abort() error
}

// TransportState is a transport's connection state.
type TransportState uint8

// The transport states.
const (
	// TransportConnected: operations reach the broker.
	TransportConnected TransportState = iota + 1
	// TransportReconnecting: operations fail with message.ErrUnavailable.
	TransportReconnecting
	// TransportClosed: after Close or a kill.
	TransportClosed
)

// String names the state.
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

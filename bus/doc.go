// Package bus is the CloudBus: typed one-way sends, request/reply calls
// and broadcasts between the services of management nodes, over a broker
// transport (bus/membus in memory, bus/amqpbus on RabbitMQ). Why its
// rules are what they are, with figures: docs/design.md, "Delivery
// rules".
//
// # Design
//
// A service registered on a bus ([CloudBus.Register]) consumes its own
// durable queue, <prefix>.message.<service>.<node>; the API services of
// all nodes share <prefix>.message.api.portal ([APIPortal]). A message
// goes to a service id: "<service>.<node>" ([ServiceID],
// [CloudBus.LocalID]) or api.portal. Payloads are values of types
// registered in a message.Registry; [Call], [Handle] and [Subscribe] are
// typed. A payload type about one resource implements message.Routed:
// the message then carries its resource, and a receiver refuses with
// message.ErrBadRequest one whose envelope names no resource or another.
// Headers pass through untouched. An [Observer] sees every send, call,
// delivery and reply.
//
// # Delivery guarantees
//
// These hold in the default delivery mode, [Confirmed]. In the [Fast]
// mode ([Config].Delivery, [WithDelivery]) a message is not confirmed,
// persisted or checked for a route: Send returns once it left the
// process and it may be lost without an error; a missing queue drops it;
// docs/delivery.md has the table.
//
//   - Send returns nil once the message is in the target queue; it is
//     kept until it runs (see "One-way messages").
//   - A Call has one outcome: the reply, the handler's coded error, or a
//     local error. After a timeout, cancellation, close or node-left the
//     handler may have run; the error's message.Retry class says what is
//     safe.
//   - A Call never hangs: ctx's deadline, [WithTimeout] or
//     Config.DefaultTimeout bounds it, and the handler's ctx ends with it.
//   - No message starts after its sender's deadline (see "Deadlines"). A
//     late request is answered with message.ErrTimeout while its caller
//     may still listen; a late one-way message is dead-lettered.
//   - A message the transport refuses before sending fails with
//     message.ErrNotSent (safe to retry), which also matches
//     message.ErrUnavailable; a connection lost after sending fails with
//     message.ErrUnavailable alone (outcome unknown).
//   - Delivery is at least once: a message is acknowledged after its
//     handler returned and its reply was published, so one taken by a node
//     that crashed runs again elsewhere, and one whose reply could not be
//     published runs again. Handlers of non-idempotent operations
//     deduplicate by [Request.ID].
//   - Just before a handler starts, the transport confirms that it still
//     holds the delivery; one it lost is not run. One whose confirmation
//     does not come before the message's deadline is refused as late.
//   - Messages about one resource to one service run one at a time, in
//     arrival order; others in parallel, at most Config.MaxConcurrency
//     per service. A handler must not synchronously call its own service
//     about the same resource. Past Config.MaxQueuePerResource waiting
//     messages, a resource refuses more with message.ErrBusy.
//   - Broadcast reaches every connected bus of the prefix once, the
//     sender's included.
//   - A service id without a queue fails at once with message.ErrNoRoute.
//
// # One-way messages
//
// When the handler of a one-way message fails, or the bus refuses it for
// a reason that may pass (busy):
//
//  1. An error of retry class message.RetryNever or message.RetryRan ends
//     it: acknowledged, counted in Stats.Failed and logged.
//  2. Any other error gives it back to its queue after
//     Config.RetryBackoff, doubling up to Config.RetryBackoffMax, for any
//     consumer of the queue ([OpRetry]).
//  3. After Config.RetryAttempts runs, or when the next would start past
//     its deadline, it goes unchanged to Config.DeadLetterQueue, the
//     reason in its x-cloudbus-dead-reason header ([OpDeadLetter]).
//  4. A one-way message whose deadline passed before it started goes
//     there too.
//
// [CloudBus.DeadLetters] lists the dead-letter queue in place;
// [CloudBus.ReplayDeadLetters] sends chosen messages again, with a fresh
// deadline, and removes them (a node replays through its ring:
// service.Node.ReplayDeadLetters).
//
// A retry runs the handler again with the same message id; once one is
// retried, messages about its resource are no longer in arrival order.
//
// # Deadlines
//
// A message carries its sender's deadline as the time left and, with a
// [Clock] (Config.Clock), as an instant in cluster time less the clock's
// error. A receiver refuses it once either has passed, counting its own
// clock's error against it, at arrival and again just before the
// handler starts; the handler's ctx ends at the deadline.
//
// # Tracing
//
// The W3C trace context ([HeaderTraceParent], [HeaderTraceState]) travels
// with each message: a handler's ctx carries its message's
// ([TraceContextFrom]), and whatever is sent with a ctx carrying one
// ([WithTraceContext]) carries it on, forwards and drained messages
// included. The bus makes no spans itself; a [Tracer] (Config.Tracer,
// e.g. package service/tracing for OpenTelemetry) does.
//
// # Shutdown
//
// [CloudBus.Shutdown] stops consuming, lets running handlers finish, then
// closes. [CloudBus.Close] fails pending calls with message.ErrClosed,
// cancels handlers' contexts and waits for them, gives back every message
// it holds as its consumers leave their queues, and deletes its reply and
// event queues. Neither closes the transport.
//
// # Testing with the in-memory bus
//
// Package bus/membus is a broker in memory with RabbitMQ's semantics and
// fault injection; the examples share one membus.Network.
package bus

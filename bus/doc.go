// Package bus is the CloudBus: typed one-way sends, request/reply calls
// and broadcasts between the services of stateless management nodes, over
// a small [Transport] interface.
//
// # Design
//
// Every management node hosts all services in one process. For each
// service it hosts, a node declares a durable queue named
//
//	<prefix>.message.<service>.<nodeUUID>     e.g. cloudbus.message.vmInstance.3694776ab31a45709259254a018913ca
//
// and the API services of all nodes consume one shared queue,
//
//	<prefix>.message.api.portal
//
// as competing consumers. A message about a resource goes to the service
// id "<service>.<owner>", where the owner is the node a consistent-hash
// ring names for the resource UUID ([ResourceServiceID]); creation and
// other non-resource messages go to the local node ([CloudBus.LocalID]).
// Each bus also has a temporary reply queue (<prefix>.reply.<node>) and a
// temporary event queue (<prefix>.event.<node>) bound to the fan-out
// <prefix>.broadcast.
//
// Payloads are values of types registered in a message.Registry under
// versioned names; typed helpers ([Call], [Handle], [HandleRequest],
// [Subscribe]) keep user code free of casts, and a handler registered
// with [HandleRequest] also sees the [Request]: the resource, headers,
// sender, node and deadline.
//
// A payload type about one resource names it by implementing
// message.Routed. Send and Call then set the envelope's resource from
// the payload (a contradicting [WithResource] fails before sending), and
// every receiver refuses with message.ErrBadRequest, without running a
// handler, a Routed message whose envelope names no resource or another
// one: a message about a resource never runs where it was not routed by
// that resource. Headers pass through untouched, so a W3C
// traceparent travels with the message. An [Observer] sees every send,
// call, delivery and reply with its latency, so metrics need no change to
// the bus.
//
// # Delivery guarantees
//
//   - Send: the message is in the target queue when Send returns nil.
//     There is no reply. It is kept until it runs: a failure that does
//     not say the message is wrong gives it back for another attempt,
//     and one that cannot run goes to the dead-letter queue, never
//     dropped (see "One-way messages" below).
//   - A message a transport refuses before sending it (the transport is
//     reconnecting, the broker refused the publish) fails with an error
//     matching message.ErrNotSent (code not_sent, retry class safe:
//     nothing was delivered) as well as message.ErrUnavailable; a
//     connection lost after the publish left has an unknown outcome
//     (message.ErrUnavailable alone).
//   - Call: exactly one outcome per call: the reply, the handler's coded
//     error, or a local error (no route, timeout, canceled, closed, node
//     left). Timeout, cancellation, closing and node-left mean the outcome
//     is unknown: the handler may have run. See message.Code.Retry.
//   - A Call never hangs: ctx's deadline, WithTimeout or
//     Config.DefaultTimeout bounds it, and the deadline travels with the
//     message so the handler's ctx expires with the caller's.
//   - No message starts after its sender's deadline, wherever it waited:
//     in a queue, in a consumer's prefetch buffer, in the socket of a
//     paused process, behind other messages on the receiver. With a
//     [Clock] on both ends (service.Node and service.Client have one) the
//     deadline travels in cluster time and the receiver checks it just
//     before the handler starts (see "Deadlines" below); without, only
//     the time left travels, counted from the message's arrival. A late
//     message is counted (Stats.Late, an OpReject observation whose Err
//     matches message.ErrTimeout) and acknowledged without running; a
//     late request is answered with message.ErrTimeout only while its
//     caller may still listen (within a second of the deadline); a late
//     one-way message goes to the dead-letter queue.
//   - Just before a handler starts, the transport confirms that it still
//     holds the delivery ([Delivery.Check]): after a pause of the
//     process, a delivery it read before runs only once the broker
//     answered a round trip sent after the pause, since the broker hands
//     the deliveries of a silent client to another consumer. A delivery
//     the transport lost is neither run nor settled (Stats.Lost).
//   - Messages about one resource (a message.Routed payload, or
//     WithResource) to one service run one at a time, in arrival order,
//     on the receiving node; others run in parallel, at most
//     Config.MaxConcurrency at once per service (each service has its
//     own pool, so services calling each other cannot starve one
//     another). A handler must not synchronously call its own
//     service about the same resource: that call would wait behind the
//     handler itself until it times out. A resource with
//     Config.MaxQueuePerResource messages waiting refuses more with
//     message.ErrBusy (safe to retry).
//   - Deliveries are acknowledged after the handler returned and its reply
//     was published (or, for a one-way message, once it ended by rule 1
//     of "One-way messages"). A reply that cannot be published (the broker is
//     unreachable, the reply queue's caller aside) does not end the
//     message: it is given back to its queue ([Delivery.Release]), not counted
//     towards Config.MaxDeliveries, and runs again (Stats.Released). A
//     message taken by a node that crashes before it was acknowledged is
//     redelivered by the transport to the queue's next consumer. So
//     delivery is at least once; handlers of non-idempotent operations
//     should deduplicate by envelope id.
//   - A node holds at most Config.Prefetch (32) unacknowledged messages
//     per queue it consumes, api.portal included; a node that stops (a
//     pause, a cut link) hands them back when its transport's connection
//     ends (bus/amqpbus: within about two AMQP heartbeats, 2-3 s).
//   - Broadcast: every bus on the prefix, the sender included, receives
//     each event once while it is connected; a bus that is down misses it.
//     Subscribers run off the receive path, one event at a time.
//   - Publishing to a service id whose queue does not exist fails at once
//     with message.ErrNoRoute; a crashed node's queues still exist, so
//     messages to it wait until a node-left event ends calls towards it
//     ([CloudBus.abandonCalls]) and a survivor moves them to their new
//     destinations ([CloudBus.reroute]; service.Node does so).
//
// # One-way messages
//
// A one-way message has no caller to tell of a failure, so a failure that
// does not say the message itself is wrong must not end it. When the
// handler of a one-way message fails, or the bus refuses it before the
// handler for a reason that may pass (busy):
//
//  1. An error whose retry class is message.RetryNever (bad_request,
//     invalid_uuid, not_found, unknown_message, too_large) or
//     message.RetryRan (bad_reply) says the message is wrong, or already
//     ran: it ends. It is acknowledged, counted (Stats.Failed) and logged.
//  2. Any other error gives the message back to its queue for another
//     attempt: not_owner, busy, no_route and not_sent (nothing ran);
//     internal, timeout, node_left and unavailable (outcome unknown: a
//     database or another dependency failed). It waits on this node for
//     Config.RetryBackoff, doubling per attempt up to
//     Config.RetryBackoffMax (defaults: 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5,
//     5, ... s), then goes back with [Delivery.Retry], which does not
//     count towards Config.MaxDeliveries and sets [HeaderAttempts].
//     Counted in Stats.Retried; observed as [OpRetry]. Any consumer of the
//     queue may take it next: on api.portal, any node's portal.
//  3. It goes to the dead-letter queue (Config.DeadLetterQueue), unchanged,
//     with [HeaderDeadReason] naming the attempts and the last error and
//     [HeaderDeadQueue] its queue, once it failed Config.RetryAttempts
//     times (default 20: about 76 s of pauses), or when the next attempt
//     would start at or after its deadline. Counted in
//     Stats.DeadLettered; observed as [OpDeadLetter].
//  4. A one-way message whose deadline passed before it could start (in
//     a queue, behind others, in a paused process, or while
//     [CloudBus.reroute] moved it) goes to the dead-letter queue too.
//
// So every one-way message a transport accepted runs, ends with an error
// that says it is wrong, or waits in the dead-letter queue with its
// reason; none is dropped silently. Requests keep their rule: the caller
// gets the error and decides. A retry runs the handler again with the
// same message id, so a handler whose effect must happen once
// deduplicates by it (package fence does, in the handler's transaction).
// One-way messages about one resource are no longer in arrival order
// once one of them is retried: the others run while it waits. A message
// waiting for its next attempt holds one of the consumer's Config.Prefetch
// slots; Close gives it back at once.
//
// # Deadlines
//
// The envelope carries the deadline twice: Timeout, the time left when
// the message was sent, and Deadline, the same instant in cluster time
// ([Clock]; see wire.Envelope). With a clock, the sender writes
// Deadline = cluster now + time left - its clock's error bound, and the
// receiver takes as the message's deadline, on its own clock, the
// earlier of (arrival + Timeout) and (Deadline - cluster now - its
// bound), read when the message arrives. It refuses the message at
// arrival, and again just before the handler starts, once that deadline
// has passed; the handler's ctx ends at it. The receiver measures the
// wait from the Deadline, not from its arrival, so time spent where
// nobody counted (a broker queue, the socket buffer of a process that
// was stopped) counts; clock errors only make the deadline earlier.
//
// # Shutdown
//
// [CloudBus.Shutdown] stops consuming, lets handlers holding messages
// finish, then closes. [CloudBus.Close] fails pending calls with
// message.ErrClosed, cancels handlers' contexts and waits for them,
// returns messages that had not started to their queues, and deletes the
// reply and event queues. Neither closes the transport: its creator does.
// Close gives back one-way messages waiting for their next attempt first,
// then stops its consumers at once ([Consumer.Abort]: bus/amqpbus closes
// the channel), so that every message it held goes
// back to its queue in the same step as the consumer leaves it: a
// survivor that deletes an evicted node's queue once it looks idle never
// deletes it while this node still holds messages of it.
//
// # Testing with the in-memory bus
//
// Package bus/membus is a broker in memory with RabbitMQ's semantics and
// fault injection (kill, drop, partition). Many nodes share one
// membus.Network in one test process; see the examples. Package
// bus/bustest is the conformance suite every transport runs.
package bus

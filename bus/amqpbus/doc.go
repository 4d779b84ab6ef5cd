// Package amqpbus is the RabbitMQ transport of the cloud bus, on
// github.com/rabbitmq/amqp091-go. It lays out the design article's queues
// on a real broker and passes the same conformance suite (bus/bustest) as
// the in-memory bus, so code tested on membus behaves the same here.
//
//	tr, err := amqpbus.Dial(ctx, amqpbus.Config{URL: "amqp://user:password@127.0.0.1:5672/"})
//	...
//	defer tr.Close()
//	b, err := bus.Open(ctx, bus.Config{Transport: tr, ...})
//
// # Topology
//
// With the bus's default prefix "cloudbus":
//
//	what                         AMQP object                                   flags
//	service queue of a node      queue cloudbus.message.<service>.<nodeUUID>   durable, not exclusive, not auto-delete, x-expires = QueueExpires
//	API portal (all nodes)       queue cloudbus.message.api.portal             durable, x-expires; every node consumes it: competing consumers, prefetch bounded per consumer
//	dead letters                 queue cloudbus.dead                           durable, x-expires
//	replies to a node            queue cloudbus.reply.<nodeUUID>               exclusive, auto-delete (dies with the connection)
//	a node's copy of broadcasts  queue cloudbus.event.<nodeUUID>               exclusive, auto-delete, bound to cloudbus.broadcast
//	broadcast fan-out            exchange cloudbus.broadcast                   fanout, not durable, auto-delete
//	sends, calls, replies        the default exchange, routing key = queue     mandatory, persistent, publisher-confirmed
//	the API entry                exchange cloudbus.api                         direct, durable, auto-delete; api.portal bound with its own name as key
//	API messages                 exchange cloudbus.api, key = cloudbus.message.api.portal   mandatory, persistent, publisher-confirmed
//
// Clients need only to publish to cloudbus.api and to declare and read
// their reply queue; the README lists the RabbitMQ permissions of the
// client and node users. A publish the broker refuses (403, or 404 for an
// entry no node declared yet) closes the publishing channel: the
// transport reopens it at the next publish and reports the broker's reason
// with message.ErrUnavailable.
//
// Every node gets every broadcast once: each has its own event queue on
// the fan-out. Replies use a per-node reply queue, as in the article's
// design, rather than RabbitMQ's direct reply-to: it was measured on this
// broker version that direct reply-to is not faster, and a reply queue is
// an ordinary queue, so replies get the same confirms, no-route handling
// and conformance tests as every other message, and the bus needs no
// transport-specific reply path.
//
// # Why the queues are durable and expire late
//
// A node killed with SIGKILL must not take its queued messages with it:
// service queues are durable and neither exclusive nor auto-delete, so
// they outlive their consumer (publishing to them still succeeds, the
// messages wait). Their x-expires (default 30 min) must stay far above the
// eviction threshold (default 3 s) plus the time a survivor needs to
// drain them, because RabbitMQ does not dead-letter the messages of a
// queue that expires: expiry must never come first.
//
// # Delivery guarantees
//
//   - Publish is mandatory and confirmed: it returns nil only once the
//     broker took the message into its queue. A queue that does not exist
//     comes back as a basic.return before the confirm, and Publish fails
//     with message.ErrNoRoute within one round trip, not at a timeout.
//   - Publish never blocks past ctx's deadline (PublishTimeout when ctx
//     has none): publishing happens on goroutines the transport owns
//     (amqp091 checks ctx only on entry), and while the broker blocks the
//     connection (connection.blocked: memory or disk alarm) publishes wait
//     on their deadline, not inside the library. A publish that times out,
//     or whose channel or connection dies before the confirm, has an
//     unknown outcome (message.ErrTimeout, message.ErrUnavailable).
//   - Deliveries are acknowledged manually, by the bus, after the handler
//     returned and its reply was published. Per path: a Call's request and
//     a Send are at least once while consumers crash (an unacknowledged
//     delivery is redelivered to the next consumer), and exactly once
//     otherwise; replies and broadcasts go to exclusive queues and are at
//     most once (a node that is down misses them, and its callers' calls
//     end with their deadline or with node-left).
//   - A message whose consumer keeps crashing (or giving it back) is not
//     redelivered forever. x-delivery-limit works only on quorum queues, so
//     on these classic queues the transport counts: a redelivered message
//     is republished with its count in a header (and the original
//     acknowledged); past QueueOptions.MaxDeliveries it goes to the
//     dead-letter queue with bus.HeaderDeadReason and bus.HeaderDeadQueue,
//     and the other messages keep flowing. A republished message moves to
//     the tail of its queue. A handler that returns an error or panics
//     does not count: the bus answers and acknowledges a request, and
//     gives a one-way message back for another attempt with
//     bus.Delivery.Retry (republished with bus.HeaderAttempts, the
//     original acknowledged: not counted) or moves it to the dead-letter
//     queue with bus.Delivery.DeadLetter (see the bus package's "One-way
//     messages").
//   - Not guaranteed: ordering across a crash (a redelivered message
//     arrives after later ones), and delivery to a queue the broker lost
//     (RabbitMQ persists durable queues' persistent messages across a
//     broker restart; a queue that expired is gone).
//
// # Recovery
//
// When the connection or a channel drops (a broker restart, `rabbitmqctl
// close_all_connections`, a network cut), the transport reconnects by
// itself for as long as it lives: attempts start 50 ms apart, double up to
// Config.ReconnectMax (2 s) and carry ±20 % jitter, so a node is back
// within about two seconds of the broker being reachable again. On each
// new connection it declares again every queue it had declared (the
// exclusive reply and event queues died with the old connection), makes
// publishing available, and only then restarts every consumer on a new
// channel: a handler that runs can always reply and forward. It reports its state through
// [bus.StateWatcher] (connected, reconnecting, closed); the bus fails
// calls waiting for a reply with message.ErrUnavailable the moment the
// connection drops (their reply queue is gone, so waiting longer is
// pointless; outcome unknown), and publishes made while reconnecting fail
// at once with message.ErrNotSent and message.ErrUnavailable (nothing was
// sent: safe to retry; the code on the wire is not_sent). So do publishes
// the broker nacks, and those the library refused before writing them.
//
// # Liveness and pauses
//
// Three mechanisms bound how long a dead link or a stopped process goes
// unnoticed, with the defaults:
//
//  1. AMQP heartbeats every Config.Heartbeat (1 s, the protocol's
//     minimum; amqp091-go counts whole seconds and would take the
//     broker's 60 s for less, so Validate refuses it). RabbitMQ closes the
//     connection of a client silent for about two heartbeats (1.9-2.7 s
//     measured) and hands its unacknowledged deliveries to the other
//     consumers: a paused node keeps its share of api.portal (at most the
//     bus's prefetch, 32) for under 3 s, within the default eviction
//     threshold.
//  2. A probe: every Config.ProbeInterval (250 ms) a round trip
//     (basic.qos) on a channel of its own; with no answer within
//     Config.ProbeTimeout (1 s) the transport cuts the TCP connection and
//     reconnects. A link that silently drops everything is noticed within
//     1.25 s, inside a node's 2 s lease (amqp091's own read deadline,
//     three heartbeats, would take 3 s). A probe whose answer is late
//     while the broker's bytes keep arriving is waited for: the answer
//     is queued behind a long body still streaming on the same TCP
//     connection, and that link is alive
//     (TestProbeQueuedBehindALongBodyKeepsTheLink: 3 MiB at 2 MB/s with a
//     200 ms probe timeout; cutting such links made a large message
//     impossible to receive and cost every node its connection under
//     50 MB hostile messages).
//  3. A watchdog ticking every 100 ms: a tick more than 500 ms late means
//     the process was paused (SIGSTOP, a frozen VM). From then on, a
//     delivery read before (or read from the socket's buffer right after
//     the pause) runs only once the broker answered a probe sent after
//     the pause, which TCP delivers after everything the broker sent
//     before it; if the connection died meanwhile the delivery is dropped
//     unrun, because the broker has requeued it ([bus.DeliveryChecker]).
//
// # Giving a delivery back
//
// A delivery the bus could not finish (its reply could not be published)
// is released ([bus.Releaser]): published again to its queue with its
// delivery count unchanged, then acknowledged, so it does not count
// towards the poison limit. If that publish fails, it is rejected for
// redelivery instead.
//
// We use our own loop rather than amqp091-go's experimental
// Config.Recovery: that retries 5 times 5 s apart by default and then
// gives up, knows nothing of the calls in flight, and would recover
// consumers whose deliveries we could not tell apart from the old ones.
// Deliveries of a dead channel are never acknowledged on a new one: each
// acknowledgement goes to the channel its delivery came on, and fails
// harmlessly if that channel is gone (the broker requeued the message).
// NotifyClose, NotifyPublish and NotifyReturn are always drained until
// the library closes them, since amqp091-go deadlocks otherwise.
//
// # Security
//
// amqps:// URLs use TLS with Config.TLS (root CAs, client certificates).
// Credentials come from the URL and never appear in logs or error
// strings: the transport names the broker by [MaskURL], and library
// errors are scrubbed of the URL and password (amqp091's URI.String would
// include the password). A message larger than Config.MaxMessageSize
// fails with message.ErrTooLarge before anything is sent.
//
// # Long messages from others
//
// The broker accepts any body up to its max_message_size, which is
// broker-wide (128 MiB by default in RabbitMQ 3.x, 16 MiB in 4.x), and
// amqp091 reads a body whole before handing it over: a queue of hostile
// 100 MiB messages would cost a node prefetch x 100 MiB. The transport
// cuts every body it receives to Config.MaxMessageSize+1 bytes as the
// frames arrive, before amqp091 sees them, and discards the rest, so a
// consumer holds at most prefetch x (MaxMessageSize+1) bytes of bodies
// (TestLongBodiesAreCutBeforeTheyAreRead: a 24 MiB body costs 6 MiB of
// allocation with a 1 MiB limit, 183 MiB without the cut). The bus
// refuses such a body as too large, and answers it with too_large if its
// reply address lies in the part kept. Operators should still set
// max_message_size in rabbitmq.conf to a little over the clients' limit,
// so that the broker refuses a long message at the publisher and never
// stores it:
//
//	max_message_size = 4259840  # 4 MiB + 64 KiB: message.DefaultMaxSize and AMQP properties
//
// # Testing
//
// The tests run against the broker named by CLOUDBUS_AMQP_URL and skip,
// naming it, when it is unset (under CI=true they fail instead). Each test
// uses its own queue prefix and deletes what it declared; faults are
// injected through a TCP proxy the test owns, never by stopping the
// shared broker.
package amqpbus

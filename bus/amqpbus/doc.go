// Package amqpbus is the RabbitMQ transport of the cloud bus, on
// github.com/rabbitmq/amqp091-go. It passes the same conformance suite
// (bus/bustest) as the in-memory bus, so code tested on membus behaves the
// same here. Why it is built as it is, with its figures, is in the
// repository's docs/design.md, "RabbitMQ transport".
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
//	service queue of a node      queue cloudbus.message.<service>.<nodeUUID>   durable, not exclusive, not auto-delete, x-expires = QueueExpires, x-queue-type = QueueType
//	API portal (all nodes)       queue cloudbus.message.api.portal             durable, x-expires, x-queue-type; every node consumes it: competing consumers, prefetch bounded per consumer
//	dead letters                 queue cloudbus.dead                           durable, x-expires, x-queue-type
//	replies to a node            queue cloudbus.reply.<nodeUUID>               classic, exclusive, auto-delete (dies with the connection)
//	a node's copy of broadcasts  queue cloudbus.event.<nodeUUID>               classic, exclusive, auto-delete, bound to cloudbus.broadcast
//	broadcast fan-out            exchange cloudbus.broadcast                   fanout, not durable, auto-delete
//	sends, calls, replies        the default exchange, routing key = queue     mandatory, persistent, publisher-confirmed
//	the API entry                exchange cloudbus.api                         direct, durable, auto-delete; api.portal bound with its own name as key
//	API messages                 exchange cloudbus.api, key = cloudbus.message.api.portal   mandatory, persistent, publisher-confirmed
//
// Clients need only to publish to cloudbus.api and to declare and read
// their reply queue; docs/operations.md lists the RabbitMQ permissions of the
// client and node users. A publish the broker refuses (403, or 404 for an
// entry no node declared yet) closes the publishing channel: the
// transport reopens it at the next publish and reports the broker's reason
// with message.ErrUnavailable.
//
// # Delivery guarantees
//
// Beyond [driver.Transport]'s contract:
//
//   - Publish returns nil only once the broker confirmed the message. A
//     publish that times out, or whose channel or connection dies before
//     the confirm, has an unknown outcome (message.ErrTimeout,
//     message.ErrUnavailable). PublishTimeout bounds a ctx with no
//     deadline, also while the broker blocks publishers.
//   - Replies and broadcasts go to exclusive queues: at most once.
//   - On a queue with MaxDeliveries, a redelivered message moves to the
//     tail of its queue.
//   - Not guaranteed: ordering across a crash, and delivery to a queue
//     that expired.
//
// # Recovery
//
// When the connection drops, the transport reconnects for as long as it
// lives (see Config.ReconnectMax), to the next broker of Config.URL's
// list if it names several (the nodes of a RabbitMQ cluster). On each
// new connection it declares again every queue and entry it had
// declared (but the queues of a closed bus's services: see
// [Transport.ForgetQueue]), makes publishing available, then restarts every consumer on
// a new channel. [Transport.State] reports reconnecting meanwhile, and
// publishes fail at once with message.ErrNotSent and
// message.ErrUnavailable (nothing was sent: safe to retry). A publish the
// broker nacks (a quorum queue electing a leader) is published again
// until the broker confirms it or its deadline passes; one still refused
// then fails with message.ErrNotSent. A consumer the broker cancels on a
// live connection (its queue deleted, or its broker node gone) consumes
// again once its queue is back.
//
// # RabbitMQ clusters
//
//	tr, err := amqpbus.Dial(ctx, amqpbus.Config{
//		URL:       "amqp://u:p@rabbit-1:5672/,amqp://u:p@rabbit-2:5672/,amqp://u:p@rabbit-3:5672/",
//		QueueType: amqpbus.QueueQuorum,
//	})
//
// With QueueQuorum the durable queues are quorum queues, replicated over
// a majority of the broker nodes; see [Config.QueueType]. Quorum queues
// refuse a conditional delete, so [Transport.DeleteQueueIfIdle] checks
// and deletes in two steps there (see its doc).
//
// # Liveness and pauses
//
//  1. AMQP heartbeats every Config.Heartbeat.
//  2. A probe (Config.ProbeInterval, Config.ProbeTimeout): a silent link
//     is dropped within ProbeInterval + ProbeTimeout, 1.25 s by default.
//     Its answers also tell how far the broker has read what the
//     transport wrote: fast publishes (PublishFast) wait while more than
//     512 KiB are unread, so that they never bury the probe's frame under
//     more than the broker reads in ProbeTimeout.
//  3. A watchdog: a tick more than 500 ms late means the process was
//     paused; a delivery read before or right after the pause then passes
//     [driver.Delivery.Check] only once the broker answered a probe sent
//     after it.
//
// # Security
//
// amqps:// URLs use TLS with Config.TLS. Credentials come from the URL and
// never appear in logs or error strings: the transport names the broker
// by [MaskURL] and scrubs the URL from library errors.
//
// # Long messages from others
//
// A received body longer than Config.MaxMessageSize is cut to
// MaxMessageSize+1 bytes as its frames arrive, so a consumer holds at
// most prefetch x (MaxMessageSize+1) bytes of bodies. Operators should
// set the broker's max_message_size a little over the clients' limit:
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

// Package membus is an in-memory transport for the cloud bus: a broker in
// one process that many nodes share, for tests, demos and embedding.
//
// It has the semantics the RabbitMQ transport has, proved by running the
// same conformance suite (bus/bustest):
//
//   - named queues; publishing to a missing queue fails at once with
//     message.ErrNoRoute;
//   - competing consumers on a shared queue (api.portal), served round
//     robin among consumers with free prefetch;
//   - fan-outs: a broadcast puts one copy into every bound queue;
//   - acknowledgements: a delivery not acknowledged when its consumer's
//     transport closes or dies goes back to its queue at its original
//     position, marked redelivered;
//   - durable queues outlive their node: a killed node's service queues
//     keep their messages, and messages sent to them wait rather than fail;
//     temporary (reply and event) queues die with their transport.
//
// A consumer's handler is called one delivery at a time, in order, on a
// goroutine of the consumer; a consumer that declares its handler
// non-blocking (driver.ConsumeOptions.NonBlocking, as the bus does for
// its service and reply queues) is called on the publisher's goroutine
// instead, before Publish returns, whenever it is idle and its queue
// holds nothing older, which saves a call two of its four goroutine
// switches.
//
// Faults are injected per node name on the [Network]: [Network.Kill]
// crashes a node, [Network.Drop] silently loses its traffic, and
// [Network.Partition] cuts it off from the broker with errors.
//
//	net := membus.New()
//	tr := net.Transport(nodeUUID) // one per node; pass to bus.Open
//	defer tr.Close()
//	...
//	net.Kill(nodeUUID) // the node's consumers vanish, its queues stay
package membus

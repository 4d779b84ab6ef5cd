// Package bustest is the conformance suite every [driver.Transport] runs,
// unchanged, so that the in-memory bus behaves like RabbitMQ and a user's
// own transport can prove it behaves like both.
//
// A transport's test calls [Run] with a [Harness]:
//
//	func TestConformance(t *testing.T) {
//		bustest.Run(t, bustest.Harness{
//			Features: bustest.Features{KilledQueuesPersist: true, CanKill: true},
//			New: func(t *testing.T) bustest.Env { return myEnv(t) },
//		})
//	}
//
// Every scenario is a named subtest with its own queue prefix and node
// UUIDs, so scenarios of several packages may share one broker. Where
// transports legitimately differ, the [Features] struct says so; a
// transport never skips scenarios in its own test.
package bustest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/stretchr/testify/require"
)

// Features declares what a transport can do where transports differ.
type Features struct {
	// CanKill: Env.Kill crashes a node's transport abruptly (no goodbye).
	// Scenarios about crashed consumers run only when it is set.
	CanKill bool
	// KilledQueuesPersist: the durable queues of a killed node keep their
	// messages for the next consumer, and publishing to them still
	// succeeds (true for RabbitMQ's durable queues and for membus).
	KilledQueuesPersist bool
	// NoRouteWithin bounds how fast publishing to a missing queue must
	// fail. Default 1 s.
	NoRouteWithin time.Duration
	// CanCut: the Env implements [Cutter], cutting a node off from the
	// broker and healing it. Scenarios about cuts run only when it is set.
	CanCut bool
}

// Harness tells the suite how to build the transport under test.
type Harness struct {
	// Features declares the transport's abilities.
	Features Features
	// New returns a fresh environment for one scenario. Transports made by
	// one Env share one broker; the suite gives each scenario its own
	// queue prefix.
	New func(t *testing.T) Env
}

// Env makes connected transports for one scenario.
type Env interface {
	// Transport returns a new transport connected as node. The Env closes
	// it when the test ends (t.Cleanup); the suite may close it earlier.
	Transport(t *testing.T, node string) driver.Transport
	// Kill crashes every transport of node as a process crash would: no
	// goodbye, unacknowledged deliveries go back to their queues. Called
	// only when Features.CanKill is set.
	Kill(t *testing.T, node string)
}

// Run runs every scenario as a named subtest.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("bustest: Harness.New is required")
	}
	if h.Features.NoRouteWithin == 0 {
		h.Features.NoRouteWithin = time.Second
	}
	run := func(s scenario, mode bus.DeliveryMode) {
		name := s.name
		if mode == bus.Fast {
			name = "fast: " + name
		}
		t.Run(name, func(t *testing.T) {
			if s.needKill && !h.Features.CanKill {
				t.Skipf("bustest: %s needs Features.CanKill, which this transport does not declare", s.name)
			}
			if s.needCut && !h.Features.CanCut {
				t.Skipf("bustest: %s needs Features.CanCut, which this transport does not declare", s.name)
			}
			c := newCluster(t, h)
			c.delivery = mode
			s.run(t, c)
		})
	}
	for _, s := range scenarios {
		run(s, bus.Confirmed)
	}
	// The scenarios that hold in the fast delivery mode too
	// (docs/delivery.md), again with every bus in it.
	for _, s := range scenarios {
		if s.fast {
			run(s, bus.Fast)
		}
	}
}

type scenario struct {
	name     string
	needKill bool
	needCut  bool
	fast     bool // holds in the fast delivery mode as well: run in both
	run      func(t *testing.T, c *cluster)
}

// scenarios lists every scenario, in the order they run.
var scenarios = []scenario{
	{name: "send", fast: true, run: testSend},
	{name: "call", fast: true, run: testCall},
	{name: "broadcast reaches every node exactly once", run: testBroadcastOnce},
	{name: "subscribe by type", run: testSubscribeByType},
	{name: "competing consumers on api.portal share the load", fast: true, run: testCompeting},
	{name: "api.portal behind its entry, for clients that may publish nowhere else", fast: true, run: testAPIEntry},
	{name: "no-route error", run: testNoRoute},
	{name: "fast: a message to a missing queue is dropped without an error", run: testFastNoRoute},
	{name: "deadline exceeded", fast: true, run: testDeadline},
	{name: "a cancelled call leaves nothing pending", fast: true, run: testCancel},
	{name: "a late reply to a finished call is dropped and counted", fast: true, run: testLateReply},
	{name: "many concurrent calls", fast: true, run: testConcurrentCalls},
	{name: "calls sharing one message id each get their own reply", fast: true, run: testSharedID},
	{name: "close with calls in flight", fast: true, run: testCloseInFlight},
	{name: "ordering from one sender into one queue", fast: true, run: testOrdering},
	{name: "a non-blocking consumer's handler runs one call at a time, in order", run: testNonBlockingConsumer},
	{name: "unknown message type", fast: true, run: testUnknownType},
	{name: "handler error codes cross the wire", fast: true, run: testErrorCodes},
	{name: "handler panic becomes an error reply and the consumer survives", fast: true, run: testPanic},
	{name: "oversize message rejected before sending", fast: true, run: testOversize},
	{name: "a killed consumer's queue keeps its messages for the next consumer", fast: true, needKill: true, run: testKilledQueueKeeps},
	{name: "a killed consumer's unacknowledged delivery is redelivered", fast: true, needKill: true, run: testRedelivery},
	{name: "a poison message is dead-lettered after a bounded number of deliveries", fast: true, run: testPoison},
	{name: "a request that waited in its queue past its deadline is not run", fast: true, run: testLateInQueue},
	{name: "a request that waited behind others past its deadline is not run", fast: true, run: testLateBehindOthers},
	{name: "a delivery whose reply cannot be published is redelivered, not counted as poison", fast: true, run: testUnrepliedRedelivered},
	{name: "a killed node's queued messages are rerouted to the new owner, none lost", fast: true, needKill: true, run: testRerouteKilledQueue},
	{name: "a queue is deleted only when idle", run: testIdleDelete},
	{name: "a transport reports its state and a stopped watcher hears no more", run: testStateReported},
	{name: "a delivery checks as held until its consumer aborts", run: testDeliveryCheck},
	{name: "a released delivery comes back, not counted towards MaxDeliveries", run: testRelease},
	{name: "an aborted consumer's deliveries are back in the queue when Abort returns", run: testAbort},
	{name: "Abort after Cancel gives back what the consumer still holds", run: testAbortAfterCancel},
	{name: "a transport cut off from the broker reports it and recovers", needCut: true, run: testCutReported},
	{name: "a transport's retry keeps an attempt count and its dead-letter keeps a reason", run: testRetryAndDeadLetter},
	{name: "a one-way message whose handler fails for a passing reason runs again until it succeeds", fast: true, run: testOneWayRetried},
	{name: "a one-way message whose error says it is wrong ends", fast: true, run: testOneWayWrongEnds},
	{name: "a one-way message whose attempts are spent is dead-lettered with its last error", fast: true, run: testOneWayAttemptsSpent},
	{name: "a one-way message is retried only within its deadline, then dead-lettered", fast: true, run: testOneWayDeadline},
	{name: "a one-way message late in its queue is dead-lettered, not dropped", fast: true, run: testOneWayLateDeadLettered},
	{name: "dead letters are listed in place and replayed by id", run: testDeadLettersReplayed},
	{name: "a message refused before sending says nothing was sent", needCut: true, run: testRefusedNotSent},
	{name: "a bus closing while its queue is deleted when idle loses nothing", run: testCloseWhileDrained},
}

// cluster is one scenario's environment: a prefix, a registry and nodes.
type cluster struct {
	t        *testing.T
	h        Harness
	env      Env
	prefix   string
	nodes    []*node
	delivery bus.DeliveryMode // every bus's Config.Delivery, unless the scenario sets it
}

// newCluster makes the scenario's environment. When the scenario ends,
// after every bus closed, a janitor transport deletes the durable queues
// the scenario left (service queues, api.portal, the dead-letter queue),
// so a shared broker keeps nothing.
func newCluster(t *testing.T, h Harness) *cluster {
	c := &cluster{
		t:      t,
		h:      h,
		env:    h.New(t),
		prefix: fmt.Sprintf("bustest-%08x", rand.Uint32()),
	}
	janitor := c.env.Transport(t, message.NewUUID())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		names := map[string]bool{c.prefix + ".message." + bus.APIPortal: true, c.prefix + ".dead": true}
		for _, n := range c.nodes {
			for _, id := range busx.Of(n).Services() {
				names[busx.Of(n).QueueName(id)] = true
			}
		}
		for q := range names {
			if err := janitor.DeleteQueue(ctx, q); err != nil {
				t.Errorf("bustest: cleanup: delete %s: %v", q, err)
			}
		}
	})
	return c
}

// node is a bus with its transport.
type node struct {
	*bus.CloudBus
	id string
	tr driver.Transport
}

// open starts a bus as node id (a fresh UUID if empty) with cfg's
// overrides, on cfg.Transport if set (a transport of c.env, possibly
// wrapped), else on a new one; it is closed at cleanup.
func (c *cluster) open(id string, cfg bus.Config) *node {
	c.t.Helper()
	if id == "" {
		id = message.NewUUID()
	}
	if cfg.Transport == nil {
		cfg.Transport = c.env.Transport(c.t, id)
	}
	tr := cfg.Transport
	cfg.Node = id
	cfg.Prefix = c.prefix
	if cfg.Delivery == bus.Confirmed {
		cfg.Delivery = c.delivery
	}
	if cfg.Registry == nil {
		cfg.Registry = Registry()
	}
	b, err := bus.Open(c.t.Context(), cfg)
	require.NoError(c.t, err, "bus.Open over the transport under test")
	c.t.Cleanup(func() { _ = b.Close() })
	n := &node{CloudBus: b, id: id, tr: tr}
	c.nodes = append(c.nodes, n)
	return n
}

// Payload types of the suite.
type (
	// Echo asks the echo handler to reply with Text and Seq.
	Echo struct {
		Text string `json:"text"` // echoed back
		Seq  int    `json:"seq"`  // echoed back
	}
	// Echoed is the reply to Echo.
	Echoed struct {
		Text string `json:"text"` // from the request
		Seq  int    `json:"seq"`  // from the request
		Node string `json:"node"` // the node that handled it
	}
	// Blob carries an arbitrary amount of data.
	Blob struct {
		Data string `json:"data"` // any size
	}
	// Ping is an event.
	Ping struct {
		Seq int `json:"seq"` // sender's sequence number
	}
	// Pong is another event type.
	Pong struct {
		Seq int `json:"seq"` // sender's sequence number
	}
	// Fail asks the handler to fail with Code.
	Fail struct {
		Code message.Code `json:"code"` // the code to fail with
	}
	// Unlisted is registered only by senders, never by receivers.
	Unlisted struct {
		X int `json:"x"` // anything
	}
)

// Registry returns a registry holding the suite's payload types.
func Registry() *message.Registry {
	reg := message.NewRegistry()
	message.MustRegister[Echo](reg, "bustest.v1.Echo")
	message.MustRegister[Echoed](reg, "bustest.v1.Echoed")
	message.MustRegister[Blob](reg, "bustest.v1.Blob")
	message.MustRegister[Ping](reg, "bustest.v1.Ping")
	message.MustRegister[Pong](reg, "bustest.v1.Pong")
	message.MustRegister[Fail](reg, "bustest.v1.Fail")
	return reg
}

func senderRegistry() *message.Registry {
	reg := Registry()
	message.MustRegister[Unlisted](reg, "bustest.v1.Unlisted")
	return reg
}

// echoHandler replies to Echo with the node's id.
func echoHandler(n *node) bus.Handler {
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, e Echo) (Echoed, error) {
		return Echoed{Text: e.Text, Seq: e.Seq, Node: n.id}, nil
	})
	return mux
}

// eventually polls cond every 5 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("bustest: after %s: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recv waits for a value on ch for at most d.
func recv[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("bustest: no %s within %s", what, d)
		panic("unreachable")
	}
}

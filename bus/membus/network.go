package membus

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/message"
)

// Network is an in-memory broker shared by the nodes of one process. It
// has the semantics the RabbitMQ transport has: named queues, competing
// consumers with prefetch, fan-outs, acknowledgements with redelivery,
// an immediate no-route error for a queue that does not exist, and
// durable queues that outlive their node. It also injects faults: kill a
// node, drop its traffic, or partition it from the broker.
//
// A Network is safe for concurrent use. It needs no Close: it holds no
// goroutines of its own; each [Transport] owns its consumers.
type Network struct {
	mu      sync.Mutex
	queues  map[string]*queue
	fanouts map[string]map[string]*queue // fan-out -> bound queues by name
	entries map[string]map[string]bool   // entry -> names of the queues bound to it
	nodes   map[string]*nodeState
	seq     uint64
}

// nodeState is the fault state of a node name, shared by its transports.
type nodeState struct {
	transports map[*Transport]struct{}
	dropped    bool
	partition  bool
}

type queue struct {
	name      string
	kind      driver.QueueKind
	owner     *Transport // declarer of a temporary queue
	fanout    string
	maxDeliv  int    // deliveries before dead-lettering; 0: unbounded
	deadQueue string // where poison messages go
	msgs      []*msg // ready messages, sorted by seq
	unacked   int    // messages delivered, not yet settled
	consumers []*consumer
	next      int // round-robin position
	deleted   bool
}

type msg struct {
	seq         uint64
	data        []byte
	redelivered bool
	handed      int               // times handed to a handler unacknowledged
	headers     map[string]string // transport headers (dead-letter reason)
}

// New returns an empty network.
func New() *Network {
	return &Network{
		queues:  make(map[string]*queue),
		fanouts: make(map[string]map[string]*queue),
		entries: make(map[string]map[string]bool),
		nodes:   make(map[string]*nodeState),
	}
}

// Transport returns a new transport attached to the network as node. The
// node name is what fault injection acts on; a node killed earlier may
// attach again (a restart). The caller closes the transport.
func (n *Network) Transport(node string) *Transport {
	t := &Transport{
		net:         n,
		node:        node,
		consumers:   make(map[*consumer]struct{}),
		outstanding: make(map[*delivery]struct{}),
	}
	n.mu.Lock()
	n.nodeState(node).transports[t] = struct{}{}
	n.mu.Unlock()
	return t
}

func (n *Network) nodeState(node string) *nodeState {
	s := n.nodes[node]
	if s == nil {
		s = &nodeState{transports: make(map[*Transport]struct{})}
		n.nodes[node] = s
	}
	return s
}

// Kill simulates the crash of node: its consumers vanish without a
// goodbye, deliveries it had not acknowledged go back to their queues
// (marked redelivered), its temporary queues are deleted, and every
// further operation of its transports fails with message.ErrUnavailable.
// Its durable queues stay with their messages, as durable RabbitMQ queues
// of a dead consumer do: messages sent to them wait, they do not fail
// with no-route. Kill does not wait for handlers that are running.
func (n *Network) Kill(node string) {
	n.mu.Lock()
	s := n.nodes[node]
	var ts []*Transport
	if s != nil {
		for t := range s.transports {
			ts = append(ts, t)
		}
		delete(n.nodes, node)
	}
	for _, t := range ts {
		t.killLocked()
	}
	n.mu.Unlock()
	for _, t := range ts {
		t.notify()
	}
}

// Drop silently loses the traffic of node while on: what it publishes or
// broadcasts vanishes (its calls say nothing), and its consumers receive
// nothing (messages for it wait in its queues; competing consumers on a
// shared queue take them). Drop(node, false) heals.
func (n *Network) Drop(node string, on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nodeState(node).dropped = on
	if !on {
		n.dispatchAllLocked()
	}
}

// Partition cuts node off from the broker while on: its publishes and
// declarations fail with message.ErrUnavailable and its consumers receive
// nothing; messages for it wait. Partition(node, false) heals.
//
// The node's transports report the cut through [Transport.State]
// (reconnecting while on, connected after), as a RabbitMQ transport
// reports a lost connection.
func (n *Network) Partition(node string, on bool) {
	n.mu.Lock()
	s := n.nodeState(node)
	changed := s.partition != on
	s.partition = on
	if !on {
		n.dispatchAllLocked()
	}
	var ts []*Transport
	if changed {
		for t := range s.transports {
			ts = append(ts, t)
		}
	}
	n.mu.Unlock()
	for _, t := range ts {
		t.notify()
	}
}

// QueueInfo describes a queue, for demos, tests and debugging.
type QueueInfo struct {
	// Name is the queue's name.
	Name string
	// Kind says whether it is durable or temporary.
	Kind driver.QueueKind
	// Fanout is the fan-out it is bound to, if any.
	Fanout string
	// Ready is the number of messages waiting for a consumer.
	Ready int
	// Consumers is the number of consumers.
	Consumers int
}

// Queues returns every queue, sorted by name.
func (n *Network) Queues() []QueueInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]QueueInfo, 0, len(n.queues))
	for _, q := range n.queues {
		out = append(out, QueueInfo{Name: q.name, Kind: q.kind, Fanout: q.fanout, Ready: len(q.msgs), Consumers: len(q.consumers)})
	}
	slices.SortFunc(out, func(a, b QueueInfo) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// Queue returns the named queue's description and whether it exists.
func (n *Network) Queue(name string) (QueueInfo, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	q, ok := n.queues[name]
	if !ok {
		return QueueInfo{}, false
	}
	return QueueInfo{Name: q.name, Kind: q.kind, Fanout: q.fanout, Ready: len(q.msgs), Consumers: len(q.consumers)}, true
}

// enqueueLocked appends a copy of data to q and dispatches.
func (n *Network) enqueueLocked(q *queue, data []byte) {
	n.seq++
	q.msgs = append(q.msgs, &msg{seq: n.seq, data: slices.Clone(data)})
	n.dispatchLocked(q)
}

// publishLocked puts a copy of data into q as enqueueLocked does, and
// returns the delivery that the caller must hand to its consumer's
// handle itself, after it unlocks (consumer.runInline), if there is one:
// when q holds no other ready message and the consumer that is next in
// turn asked for it (driver.ConsumeOptions.NonBlocking) and is not
// handling another. Any other consumer gets the message as dispatchLocked
// gives it, in the same turn.
func (n *Network) publishLocked(q *queue, data []byte) *delivery {
	if len(q.msgs) > 0 || len(q.consumers) == 0 {
		n.enqueueLocked(q, data)
		return nil
	}
	c := n.pickLocked(q)
	if c == nil {
		n.enqueueLocked(q, data)
		return nil
	}
	n.seq++
	m := &msg{seq: n.seq, data: slices.Clone(data)}
	d := n.handOverLocked(q, c, m)
	if !c.nonBlocking || c.busy || len(c.inbox) > 0 {
		c.inbox = append(c.inbox, d)
		c.wakeUp()
		return nil
	}
	c.busy = true
	d.handed = true
	m.handed++
	c.t.wg.Add(1) // Close waits for this handle call too
	return d
}

// handOverLocked makes m a delivery to c, counted as unsettled.
func (n *Network) handOverLocked(q *queue, c *consumer, m *msg) *delivery {
	d := &delivery{net: n, c: c, q: q, m: m, redelivered: m.redelivered}
	c.unacked++
	q.unacked++
	c.t.outstanding[d] = struct{}{}
	return d
}

// requeueLocked puts m back in q at its original position.
func (n *Network) requeueLocked(q *queue, m *msg) {
	if q.deleted {
		return
	}
	i := sort.Search(len(q.msgs), func(i int) bool { return q.msgs[i].seq > m.seq })
	q.msgs = slices.Insert(q.msgs, i, m)
	n.dispatchLocked(q)
}

// dispatchLocked hands ready messages to consumers with free prefetch,
// round robin, skipping consumers of nodes that are dropped or cut off.
func (n *Network) dispatchLocked(q *queue) {
	for len(q.msgs) > 0 {
		c := n.pickLocked(q)
		if c == nil {
			return
		}
		m := popFront(&q.msgs)
		if q.maxDeliv > 0 && m.handed >= q.maxDeliv {
			n.deadLetterLocked(q, m)
			continue
		}
		d := n.handOverLocked(q, c, m)
		c.inbox = append(c.inbox, d)
		c.wakeUp()
	}
}

// popFront removes and returns the first element of the non-empty *s.
// A slice it empties goes back to the start of its array, so that a
// queue that keeps up (the usual case) appends without allocating.
func popFront[T any](s *[]*T) *T {
	v := (*s)[0]
	(*s)[0] = nil
	if len(*s) == 1 {
		*s = (*s)[:0]
	} else {
		*s = (*s)[1:]
	}
	return v
}

func (n *Network) pickLocked(q *queue) *consumer {
	for i := range q.consumers {
		c := q.consumers[(q.next+i)%len(q.consumers)]
		if c.unacked < c.prefetch && n.reachableLocked(c.t) {
			q.next = (q.next + i + 1) % len(q.consumers)
			return c
		}
	}
	return nil
}

func (n *Network) reachableLocked(t *Transport) bool {
	if t.dead {
		return false
	}
	s := n.nodes[t.node]
	return s == nil || (!s.dropped && !s.partition)
}

// deadLetterLocked moves a poison message of q to q's dead-letter queue
// (dropping it if that queue is gone).
func (n *Network) deadLetterLocked(q *queue, m *msg) {
	dl, ok := n.queues[q.deadQueue]
	if !ok {
		return
	}
	n.seq++
	dl.msgs = append(dl.msgs, &msg{seq: n.seq, data: m.data, headers: map[string]string{
		driver.HeaderDeadReason: fmt.Sprintf("handed to a consumer %d times without acknowledgement (limit %d): each consumer crashed or gave it back", m.handed, q.maxDeliv),
		driver.HeaderDeadQueue:  q.name,
	}})
	n.dispatchLocked(dl)
}

func (n *Network) dispatchAllLocked() {
	for _, q := range n.queues {
		n.dispatchLocked(q)
	}
}

func (n *Network) deleteQueueLocked(q *queue) {
	q.deleted = true
	q.msgs = nil
	delete(n.queues, q.name)
	if q.fanout != "" {
		delete(n.fanouts[q.fanout], q.name)
	}
	for _, bound := range n.entries {
		delete(bound, q.name) // a deleted queue's bindings go with it, as on RabbitMQ
	}
	for _, c := range q.consumers {
		c.stopLocked()
	}
	q.consumers = nil
}

func unavailable(node, why string) error {
	return fmt.Errorf("membus: node %s %s: %w", node, why, message.ErrUnavailable)
}

// notSent marks err, a publish refused because the node is killed or
// partitioned, with message.ErrNotSent (nothing reached the broker; a
// retry is safe); a closed transport's message.ErrClosed stays as it is.
func notSent(err error) error {
	if !errors.Is(err, message.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", message.ErrNotSent, err)
}

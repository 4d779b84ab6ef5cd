package membus

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/message"
)

// Transport is one node's connection to a [Network]. It implements
// [driver.Transport]; create it with [Network.Transport].
type Transport struct {
	net  *Network
	node string

	// Guarded by net.mu:
	closed      bool // Close was called
	dead        bool // closed or killed: consumers gone, operations fail
	consumers   map[*consumer]struct{}
	outstanding map[*delivery]struct{} // handed out, not yet settled

	wg sync.WaitGroup // consumer goroutines

	notifyMu  sync.Mutex // held while watchers are called, and by their stop
	watchMu   sync.Mutex // guards watchers, nextWatch, lastState; never held with net.mu
	watchers  map[int]func(driver.TransportState)
	nextWatch int
	lastState driver.TransportState
}

var (
	_ driver.Transport = (*Transport)(nil)
	_ driver.Consumer  = (*consumer)(nil)
	_ driver.Delivery  = (*delivery)(nil)
)

// State implements [driver.Transport]: closed after Close or a kill,
// reconnecting while the node is partitioned, else connected.
func (t *Transport) State() driver.TransportState {
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	return t.stateLocked()
}

func (t *Transport) stateLocked() driver.TransportState {
	switch {
	case t.closed || t.dead:
		return driver.TransportClosed
	case t.net.nodes[t.node] != nil && t.net.nodes[t.node].partition:
		return driver.TransportReconnecting
	}
	return driver.TransportConnected
}

// WatchState implements [driver.Transport]: f is called with every later
// change (a partition, its healing, Close or a kill), in order, on the
// goroutine that caused it.
func (t *Transport) WatchState(f func(driver.TransportState)) (stop func()) {
	st := t.State()
	t.watchMu.Lock()
	if t.watchers == nil {
		t.watchers = make(map[int]func(driver.TransportState))
		t.lastState = st
	}
	id := t.nextWatch
	t.nextWatch++
	t.watchers[id] = f
	t.watchMu.Unlock()
	return func() {
		t.notifyMu.Lock()
		defer t.notifyMu.Unlock()
		t.watchMu.Lock()
		delete(t.watchers, id)
		t.watchMu.Unlock()
	}
}

// notify tells the watchers the current state if it changed. Called
// without net.mu held.
func (t *Transport) notify() {
	t.notifyMu.Lock()
	defer t.notifyMu.Unlock()
	st := t.State()
	t.watchMu.Lock()
	if st == t.lastState || t.watchers == nil {
		t.watchMu.Unlock()
		return
	}
	t.lastState = st
	fs := make([]func(driver.TransportState), 0, len(t.watchers))
	for _, f := range t.watchers {
		fs = append(fs, f)
	}
	t.watchMu.Unlock()
	for _, f := range fs {
		f(st)
	}
}

// DeleteQueueIfIdle implements [driver.Transport]; a delivery not yet
// settled counts, whether or not its consumer was cancelled.
func (t *Transport) DeleteQueueIfIdle(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := t.checkLocked("delete", name); err != nil {
		return err
	}
	q, ok := n.queues[name]
	if !ok {
		return nil
	}
	if len(q.msgs) > 0 || q.unacked > 0 || len(q.consumers) > 0 {
		return fmt.Errorf("membus: delete %s: %d ready, %d unacknowledged, %d consumers: %w",
			name, len(q.msgs), q.unacked, len(q.consumers), message.ErrBusy)
	}
	n.deleteQueueLocked(q)
	return nil
}

// Node returns the node name the transport was attached as.
func (t *Transport) Node() string { return t.node }

// checkLocked reports why t cannot act now, if it cannot.
func (t *Transport) checkLocked(op, name string) error {
	switch {
	case t.closed:
		return fmt.Errorf("membus: %s %s: transport of node %s: %w", op, name, t.node, message.ErrClosed)
	case t.dead:
		return unavailable(t.node, "was killed")
	}
	if s := t.net.nodes[t.node]; s != nil && s.partition {
		return unavailable(t.node, "is partitioned from the broker")
	}
	return nil
}

func (t *Transport) droppedLocked() bool {
	s := t.net.nodes[t.node]
	return s != nil && s.dropped
}

// DeclareQueue implements [driver.Transport].
func (t *Transport) DeclareQueue(ctx context.Context, name string, opts driver.QueueOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if name == "" {
		return fmt.Errorf("membus: declare: empty queue name: %w", message.ErrBadRequest)
	}
	if opts.Kind != driver.QueueDurable && opts.Kind != driver.QueueTemporary {
		return fmt.Errorf("membus: declare %s: unknown queue kind %s: %w", name, opts.Kind, message.ErrBadRequest)
	}
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := t.checkLocked("declare", name); err != nil {
		return err
	}
	if q, ok := n.queues[name]; ok {
		if q.kind != opts.Kind || q.fanout != opts.Fanout {
			return fmt.Errorf("membus: declare %s: exists as %s bound to %q, declared as %s bound to %q: %w",
				name, q.kind, q.fanout, opts.Kind, opts.Fanout, message.ErrBadRequest)
		}
		return nil
	}
	if opts.MaxDeliveries > 0 && opts.DeadLetter == "" {
		return fmt.Errorf("membus: declare %s: MaxDeliveries needs a DeadLetter queue: %w", name, message.ErrBadRequest)
	}
	q := &queue{name: name, kind: opts.Kind, fanout: opts.Fanout, maxDeliv: opts.MaxDeliveries, deadQueue: opts.DeadLetter}
	if opts.Kind == driver.QueueTemporary {
		q.owner = t
	}
	n.queues[name] = q
	if opts.Fanout != "" {
		if n.fanouts[opts.Fanout] == nil {
			n.fanouts[opts.Fanout] = make(map[string]*queue)
		}
		n.fanouts[opts.Fanout][name] = q
	}
	return nil
}

// DeleteQueue implements [driver.Transport].
func (t *Transport) DeleteQueue(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := t.checkLocked("delete", name); err != nil {
		return err
	}
	if q, ok := n.queues[name]; ok {
		n.deleteQueueLocked(q)
	}
	return nil
}

// Publish implements [driver.Transport].
func (t *Transport) Publish(ctx context.Context, queue string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n := t.net
	n.mu.Lock()
	if err := t.checkLocked("publish to", queue); err != nil {
		n.mu.Unlock()
		return notSent(err)
	}
	q, ok := n.queues[queue]
	if !ok {
		n.mu.Unlock()
		return fmt.Errorf("membus: publish: queue %s does not exist: %w", queue, message.ErrNoRoute)
	}
	if t.droppedLocked() {
		n.mu.Unlock()
		return nil // lost on the way, silently
	}
	d := n.publishLocked(q, data)
	n.mu.Unlock()
	if d != nil {
		d.c.runInline(d)
	}
	return nil
}

// DeclareEntry implements [driver.Transport]: the entry forwards to the
// queues bound to it, by name. The queue must exist.
func (t *Transport) DeclareEntry(ctx context.Context, entry, queue string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if entry == "" {
		return fmt.Errorf("membus: declare entry: empty name: %w", message.ErrBadRequest)
	}
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := t.checkLocked("declare entry", entry); err != nil {
		return err
	}
	if _, ok := n.queues[queue]; !ok {
		return fmt.Errorf("membus: bind %s to entry %s: queue does not exist: %w", queue, entry, message.ErrNoRoute)
	}
	if n.entries[entry] == nil {
		n.entries[entry] = make(map[string]bool)
	}
	n.entries[entry][queue] = true
	return nil
}

// PublishVia implements [driver.Transport].
func (t *Transport) PublishVia(ctx context.Context, entry, queue string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n := t.net
	n.mu.Lock()
	err := t.checkLocked("publish via entry "+entry+" to", queue)
	bound := n.entries[entry][queue]
	n.mu.Unlock()
	if err != nil {
		return notSent(err)
	}
	if !bound {
		return fmt.Errorf("membus: publish to %s via entry %s: no such binding: %w", queue, entry, message.ErrNoRoute)
	}
	return t.Publish(ctx, queue, data)
}

// Broadcast implements [driver.Transport].
func (t *Transport) Broadcast(ctx context.Context, fanout string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := t.checkLocked("broadcast to", fanout); err != nil {
		return notSent(err)
	}
	if t.droppedLocked() {
		return nil
	}
	for _, q := range n.fanouts[fanout] {
		n.enqueueLocked(q, data)
	}
	return nil
}

// Consume implements [driver.Transport].
func (t *Transport) Consume(ctx context.Context, queue string, opts driver.ConsumeOptions, handle func(driver.Delivery)) (driver.Consumer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if handle == nil {
		return nil, fmt.Errorf("membus: consume %s: nil handler: %w", queue, message.ErrBadRequest)
	}
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := t.checkLocked("consume", queue); err != nil {
		return nil, err
	}
	q, ok := n.queues[queue]
	if !ok {
		return nil, fmt.Errorf("membus: consume: queue %s does not exist: %w", queue, message.ErrNoRoute)
	}
	c := &consumer{
		t:           t,
		q:           q,
		prefetch:    max(opts.Prefetch, 1),
		nonBlocking: opts.NonBlocking,
		handle:      handle,
		wake:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
	}
	q.consumers = append(q.consumers, c)
	t.consumers[c] = struct{}{}
	t.wg.Add(1)
	go c.run()
	n.dispatchLocked(q)
	return c, nil
}

// Close implements [driver.Transport]: it stops the consumers, requeues what
// they had not acknowledged, deletes the temporary queues it declared and
// waits until no handle call is running. It is idempotent.
func (t *Transport) Close() error {
	n := t.net
	n.mu.Lock()
	if !t.closed {
		t.closed = true
		if !t.dead {
			t.killLocked()
		}
		if s := n.nodes[t.node]; s != nil {
			delete(s.transports, t)
		}
	}
	n.mu.Unlock()
	t.notify()
	t.wg.Wait()
	return nil
}

// killLocked ends t as a crash would, without waiting for handlers.
func (t *Transport) killLocked() {
	n := t.net
	t.dead = true
	for c := range t.consumers {
		c.stopLocked()
	}
	for d := range t.outstanding {
		d.settleLocked(true, true)
	}
	for _, q := range n.queues {
		if q.owner == t {
			n.deleteQueueLocked(q)
		}
	}
}

// consumer delivers one queue's messages to a handler, one at a time.
type consumer struct {
	t        *Transport
	q        *queue
	prefetch int
	handle   func(driver.Delivery)
	// nonBlocking: handle may be called on a publisher's goroutine
	// (driver.ConsumeOptions.NonBlocking; Network.publishLocked).
	nonBlocking bool

	// Guarded by net.mu:
	unacked int
	inbox   []*delivery // dispatched to this consumer, not yet handed over
	busy    bool        // a handle call runs (on run's goroutine or a publisher's)
	stopped bool
	aborted bool // Abort gave back what it held

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

func (c *consumer) wakeUp() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *consumer) run() {
	defer c.t.wg.Done()
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		}
		n := c.t.net
		n.mu.Lock()
		for !c.stopped && !c.busy && len(c.inbox) > 0 {
			d := popFront(&c.inbox)
			d.handed = true
			d.m.handed++
			c.busy = true
			n.mu.Unlock()
			c.handle(d)
			n.mu.Lock()
			c.busy = false
		}
		n.mu.Unlock()
	}
}

// runInline calls handle with d on the publisher's goroutine
// (Network.publishLocked marked c busy and counted the call in the
// transport's wait group). Deliveries dispatched to c meanwhile wait in
// its inbox, and run's goroutine takes them once this call is over.
func (c *consumer) runInline(d *delivery) {
	defer c.t.wg.Done()
	c.handle(d)
	n := c.t.net
	n.mu.Lock()
	c.busy = false
	if len(c.inbox) > 0 {
		c.wakeUp()
	}
	n.mu.Unlock()
}

// stopLocked detaches c from its queue; messages dispatched to it but not
// handed over go back to the queue as if never delivered.
func (c *consumer) stopLocked() {
	if c.stopped {
		return
	}
	c.stopped = true
	close(c.stop)
	q := c.q
	if i := slices.Index(q.consumers, c); i >= 0 {
		q.consumers = slices.Delete(q.consumers, i, i+1)
		q.next = 0
	}
	delete(c.t.consumers, c)
	inbox := c.inbox
	c.inbox = nil
	for _, d := range inbox {
		d.settleLocked(true, false)
	}
}

// Cancel implements [driver.Consumer]: deliveries already handed over may
// still be settled until the transport closes.
func (c *consumer) Cancel() error {
	n := c.t.net
	n.mu.Lock()
	c.stopLocked()
	n.mu.Unlock()
	<-c.done
	return nil
}

// Abort implements [driver.Consumer]: under the network's lock, c leaves
// its queue and every delivery it holds unsettled goes back to the queue,
// marked redelivered if it was handed over; after Cancel too, once.
func (c *consumer) Abort() error {
	n := c.t.net
	n.mu.Lock()
	c.stopLocked()
	if !c.aborted {
		c.aborted = true
		for d := range c.t.outstanding {
			if d.c == c {
				d.settleLocked(true, true)
			}
		}
	}
	n.mu.Unlock()
	<-c.done
	return nil
}

// delivery is one message handed to a consumer.
type delivery struct {
	net         *Network
	c           *consumer
	q           *queue
	m           *msg
	redelivered bool
	handed      bool // given to the handle function (guarded by net.mu)
	settled     bool // acked, rejected or requeued (guarded by net.mu)
}

func (d *delivery) Body() []byte      { return d.m.data }
func (d *delivery) Redelivered() bool { return d.redelivered }

func (d *delivery) Header(key string) string { return d.m.headers[key] }

func (d *delivery) Ack() error {
	d.net.mu.Lock()
	defer d.net.mu.Unlock()
	d.settleLocked(false, false)
	return nil
}

func (d *delivery) Reject(requeue bool) error {
	d.net.mu.Lock()
	defer d.net.mu.Unlock()
	d.settleLocked(requeue, true)
	return nil
}

// Check implements [driver.Delivery]: the delivery is still held
// unless its transport was killed or closed (which gave it back to its
// queue) or it was settled already.
func (d *delivery) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.net.mu.Lock()
	defer d.net.mu.Unlock()
	switch {
	case d.settled:
		return fmt.Errorf("membus: delivery of %s: already settled (given back to the queue): %w", d.q.name, message.ErrUnavailable)
	case d.c.t.dead:
		return unavailable(d.c.t.node, "was killed; its deliveries went back to their queues")
	}
	return nil
}

// Release implements [driver.Delivery]: the message goes back to its queue
// without counting as a failed delivery.
func (d *delivery) Release() error {
	d.net.mu.Lock()
	defer d.net.mu.Unlock()
	if !d.settled && d.handed && d.m.handed > 0 {
		d.m.handed-- // not a failed delivery
	}
	d.settleLocked(true, true)
	return nil
}

// Retry implements [driver.Delivery]: the message goes back to its queue
// with driver.HeaderAttempts set to attempts, without counting as a failed
// delivery.
func (d *delivery) Retry(attempts int) error {
	d.net.mu.Lock()
	defer d.net.mu.Unlock()
	if d.settled {
		return nil
	}
	if d.handed && d.m.handed > 0 {
		d.m.handed-- // not a failed delivery
	}
	h := maps.Clone(d.m.headers)
	if h == nil {
		h = make(map[string]string, 1)
	}
	h[driver.HeaderAttempts] = strconv.Itoa(attempts)
	d.m.headers = h
	d.settleLocked(true, true)
	return nil
}

// DeadLetter implements [driver.Delivery]: the message moves to the queue
// named dead with reason, and leaves its own queue. If the dead-letter
// queue does not exist, the message goes back to its own queue for
// redelivery and the error matches message.ErrNoRoute.
func (d *delivery) DeadLetter(dead, reason string) error {
	n := d.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if d.settled {
		return nil
	}
	dl, ok := n.queues[dead]
	if !ok {
		d.settleLocked(true, true)
		return fmt.Errorf("membus: dead-letter a message of %s: queue %s does not exist; given back to its queue: %w", d.q.name, dead, message.ErrNoRoute)
	}
	d.settleLocked(false, false)
	n.seq++
	dl.msgs = append(dl.msgs, &msg{seq: n.seq, data: d.m.data, headers: map[string]string{
		driver.HeaderDeadReason: reason,
		driver.HeaderDeadQueue:  d.q.name,
	}})
	n.dispatchLocked(dl)
	return nil
}

// settleLocked finishes d once: requeue puts the message back (marked
// redelivered if it had been handed over and redeliver is set).
func (d *delivery) settleLocked(requeue, redeliver bool) {
	if d.settled {
		return
	}
	d.settled = true
	d.c.unacked--
	d.q.unacked--
	delete(d.c.t.outstanding, d)
	if !requeue {
		d.m.handed = 0 // settled for good
	}
	if requeue {
		if d.handed && redeliver {
			d.m.redelivered = true
		}
		d.net.requeueLocked(d.q, d.m)
	}
	d.net.dispatchLocked(d.q)
}

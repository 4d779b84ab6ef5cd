package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
)

// Run starts the node and serves until ctx ends, the node is closed, or
// peers evict it.
//
// Joining keeps one property: no ring ever contains a node before its
// queues exist. Run opens the bus, starts the services, declares every
// service queue and the api.portal consumer, and only then registers the
// heartbeat record, fills its ring from the membership and broadcasts
// NodeJoined; then Ready is closed.
//
// When ctx ends (or Close is called) the node leaves in order, keeping
// the mirror property: a leaving node leaves every ring before its queues
// are deleted. It removes itself from its own ring, deletes its record,
// broadcasts NodeLeft and has every peer confirm it dropped the node;
// then it drains its queues (every message sent before is handled),
// stops its services and deletes its queues. Run then returns nil.
//
// If peers evict the node, it stops handling messages at once (new
// owners may already be handling its resources), tells the services'
// EvictionListeners, deletes its queues and returns [ErrEvicted].
//
// Run may be called once.
func (n *Node) Run(ctx context.Context) (err error) {
	first := false
	n.runOnce.Do(func() { first = true })
	if !first {
		return errors.New("service: Run called twice; create a new Node to run again")
	}
	ctx, cancel := context.WithCancel(ctx)
	n.mu.Lock()
	n.cancel = cancel
	n.mu.Unlock()
	defer func() {
		cancel()
		n.runErr = err
		n.state.Store(int32(StateStopped))
		close(n.done)
	}()

	n.state.Store(int32(StateStarting))
	if err := n.join(ctx); err != nil {
		n.abort()
		return err
	}
	n.state.Store(int32(StateServing))
	close(n.ready)
	n.log.Info("node serving", "epoch", n.Epoch(), "members", len(n.ring.Members()), "fingerprint", n.ring.Fingerprint())

	n.hooks.start()
	reconcileDone := make(chan struct{})
	go func() {
		defer close(reconcileDone)
		n.reconcileLoop(ctx)
	}()

	runErr := n.monitor.Run(ctx)
	cancel()
	<-reconcileDone
	if errors.Is(runErr, heartbeat.ErrEvicted) {
		n.state.Store(int32(StateEvicted))
		n.log.Warn("evicted by peers: stopped serving")
		n.hooks.evicted()
		n.hooks.close()
		n.stopServing(false)
		return ErrEvicted
	}
	n.state.Store(int32(StateLeaving))
	n.leave()
	n.hooks.close()
	return nil
}

// join opens the bus, starts services, declares the queues, joins the
// membership and fills the ring, in that order.
func (n *Node) join(ctx context.Context) error {
	bc := n.cfg.Bus
	bc.Transport = n.cfg.Transport
	bc.Node = n.id
	bc.Prefix = n.cfg.Prefix
	bc.Registry = n.cfg.Registry
	bc.Ring = n.ring
	bc.Logger = n.cfg.Logger
	b, err := bus.Open(ctx, bc)
	if err != nil {
		return fmt.Errorf("service: start node %s: %w", n.id, err)
	}
	n.bus.Store(b)

	if _, err := bus.Subscribe(b, func(ctx context.Context, ev message.NodeJoined) {
		if ev.Node != n.id {
			n.memberJoined(ev.Node, ev.Epoch, "broadcast")
		}
	}); err != nil {
		return err
	}
	if _, err := bus.Subscribe(b, func(ctx context.Context, ev message.NodeLeft) {
		if ev.Node != n.id {
			calls := abandonCalls
			if ev.Reason == message.LeaveGoodbye {
				calls = keepCalls // it drains and answers what it took
			}
			n.memberLeft(ev.Node, ev.Epoch, "broadcast: "+string(ev.Reason), calls)
		}
	}); err != nil {
		return err
	}

	for _, s := range n.cfg.Services {
		if st, ok := s.(Starter); ok {
			if err := st.Start(ctx, n); err != nil {
				return fmt.Errorf("service: start %s: %w", s.Name(), err)
			}
		}
	}
	if err := b.Register(ctx, membershipService, n.membershipHandler()); err != nil {
		return fmt.Errorf("service: start node %s: %w", n.id, err)
	}
	for _, s := range n.cfg.Services {
		if err := b.Register(ctx, s.Name(), n.guard(s)); err != nil {
			return fmt.Errorf("service: start node %s: %w", n.id, err)
		}
	}
	if err := b.RegisterShared(ctx, bus.APIPortal, bus.HandlerFunc(n.portal)); err != nil {
		return fmt.Errorf("service: start node %s: %w", n.id, err)
	}

	// The queues exist: only now may any ring contain this node.
	epoch, records, err := n.monitor.Join(ctx)
	if err != nil {
		return fmt.Errorf("service: node %s: join the membership: %w", n.id, err)
	}
	n.mu.Lock()
	n.epoch = epoch
	n.mu.Unlock()
	for _, r := range records {
		n.memberJoined(r.Node, r.Epoch, "membership")
	}
	n.memberJoined(n.id, epoch, "self")
	if err := b.Broadcast(ctx, message.NodeJoined{Node: n.id, Epoch: epoch}); err != nil {
		n.log.Warn("broadcast NodeJoined failed; peers will add this node from the membership store", "err", err)
	}
	return nil
}

// abort undoes a failed start: nothing joined the ring, so the queues
// can go at once.
func (n *Node) abort() {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaveTimeout)
	defer cancel()
	if n.Epoch() != 0 {
		_ = n.monitor.Leave(ctx)
	}
	n.stopServing(false)
}

// leave is the orderly goodbye; see Run.
func (n *Node) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaveTimeout)
	defer cancel()
	start := time.Now()
	epoch := n.Epoch()
	n.memberLeft(n.id, epoch, "leaving", keepCalls)
	peers := n.ring.Members()
	if err := n.monitor.Leave(ctx); err != nil {
		n.log.Warn("leave: delete heartbeat record", "err", err)
	}
	b := n.Bus()
	if err := b.Broadcast(ctx, message.NodeLeft{Node: n.id, Epoch: epoch, Reason: message.LeaveGoodbye}); err != nil {
		n.log.Warn("leave: broadcast NodeLeft", "err", err)
	}
	confirmed := n.confirmLeave(ctx, peers, epoch)
	if err := b.Drain(ctx); err != nil {
		n.log.Warn("leave: drain queues", "err", err)
	}
	n.stopServing(true)
	n.log.Info("node left", "peers", len(peers), "confirmed", confirmed, "took", time.Since(start).Round(time.Millisecond))
}

// stopServing stops the services' consumers, runs the Stoppers, deletes
// the node's queues and closes the bus. After an orderly leave (drained)
// the handlers have finished already; otherwise (eviction, failed start)
// their contexts are canceled at once: this node no longer owns anything.
func (n *Node) stopServing(drained bool) {
	b := n.Bus()
	if b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaveTimeout)
	defer cancel()
	if !drained {
		if err := b.Close(); err != nil {
			n.log.Warn("close bus", "err", err)
		}
	}
	for _, s := range n.cfg.Services {
		if st, ok := s.(Stopper); ok {
			if err := st.Stop(ctx); err != nil {
				n.log.Warn("stop service", "service", s.Name(), "err", err)
			}
		}
	}
	for _, name := range append([]string{membershipService}, n.serviceNames()...) {
		q := b.QueueName(bus.ServiceID(name, n.id))
		if err := n.cfg.Transport.DeleteQueue(ctx, q); err != nil {
			n.log.Warn("delete queue", "queue", q, "err", err)
		}
	}
	if err := b.Close(); err != nil {
		n.log.Warn("close bus", "err", err)
	}
}

func (n *Node) serviceNames() []string {
	out := make([]string, 0, len(n.cfg.Services))
	for _, s := range n.cfg.Services {
		out = append(out, s.Name())
	}
	return out
}

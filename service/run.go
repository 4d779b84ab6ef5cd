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

// Run starts the node and serves until ctx ends or the node is closed.
//
// Joining keeps one property: no ring ever contains a node before its
// queues exist. Run opens the bus, starts the services, declares every
// service queue, and only then registers the heartbeat record, fills its
// ring from the membership, starts consuming api.portal (whose messages
// it routes by that ring) and broadcasts NodeJoined; then Ready is
// closed.
//
// When ctx ends (or Close is called) the node leaves in order, keeping
// the mirror property: a leaving node leaves every ring before its queues
// are deleted. It removes itself from its own ring, deletes its record,
// broadcasts NodeLeft and has every peer confirm it dropped the node;
// then it drains its queues (every message sent before is handled),
// stops its services and deletes its queues. Run then returns nil.
//
// While the node cannot write its heartbeat for longer than the lease,
// it refuses messages about resources with message.ErrNotOwner (it is
// fenced: peers may soon evict it and take them over). If peers do evict
// it, it stops handling messages at once, tells the services'
// EvictionListeners, deletes its queues and, unless Config.NoRejoin is
// set, joins again with a new epoch (same UUID) one beat interval later;
// with NoRejoin, Run returns [ErrEvicted].
//
// Run may be called once. When it returns, it has closed the transport
// if the node owns it (Config.OwnTransport).
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
		if n.cfg.OwnTransport {
			if cerr := n.cfg.Transport.Close(); cerr != nil {
				n.log.Warn("close transport", "err", cerr)
			}
		}
		n.runErr = err
		n.setState(StateStopped)
		close(n.done)
	}()

	for life := 1; ; life++ {
		err := n.live(ctx, life)
		if !errors.Is(err, ErrEvicted) || n.cfg.NoRejoin || ctx.Err() != nil {
			n.hooks.close()
			n.stopServices()
			if ctx.Err() != nil && errors.Is(err, ErrEvicted) {
				return nil // closed while evicted
			}
			return err
		}
		n.log.Warn("rejoining with a new epoch after eviction", "life", life+1)
		select {
		case <-ctx.Done():
		case <-time.After(n.cfg.Heartbeat.Interval):
		}
	}
}

// live is one life of the node: join, serve, and leave or be evicted.
func (n *Node) live(ctx context.Context, life int) error {
	n.setState(StateStarting)
	mon, err := heartbeat.NewMonitor(n.cfg.Store, n.id, n.cfg.Heartbeat, heartbeat.ListenerFunc(n.onHeartbeat), n.log)
	if err != nil {
		return err
	}
	n.monitor.Store(mon)
	if err := n.join(ctx, life == 1); err != nil {
		n.abort()
		return err
	}
	n.setState(StateServing)
	if life == 1 {
		close(n.ready)
		n.hooks.start()
	}
	n.log.Info("node serving", "epoch", n.Epoch(), "members", len(n.ring.Members()), "fingerprint", n.ring.Fingerprint())

	lifeCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	reconcileDone := make(chan struct{})
	go func() {
		defer close(reconcileDone)
		n.reconcileLoop(lifeCtx)
	}()

	runErr := mon.Run(lifeCtx)
	cancel()
	<-reconcileDone
	if errors.Is(runErr, heartbeat.ErrEvicted) {
		n.setState(StateEvicted)
		n.log.Warn("evicted by peers: stopped serving")
		n.hooks.evicted()
		n.stopServing(false)
		return ErrEvicted
	}
	n.setState(StateLeaving)
	n.leave()
	return nil
}

// stopServices runs the services' Stoppers once, when Run ends.
func (n *Node) stopServices() {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaveTimeout)
	defer cancel()
	for _, s := range n.cfg.Services {
		if st, ok := s.(Stopper); ok {
			if err := st.Stop(ctx); err != nil {
				n.log.Warn("stop service", "service", s.Name(), "err", err)
			}
		}
	}
}

// join opens the bus, starts services (in the first life), declares the
// queues, joins the membership and fills the ring, in that order.
func (n *Node) join(ctx context.Context, first bool) error {
	bc := n.cfg.Bus
	bc.Transport = n.cfg.Transport
	bc.Node = n.id
	bc.Prefix = n.cfg.Prefix
	bc.Registry = n.cfg.Registry
	bc.Ring = n.ring
	bc.Logger = n.cfg.Logger
	if bc.Clock == nil {
		bc.Clock = bus.ClockFunc(n.ClusterTime)
	}
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
		if st, ok := s.(Starter); ok && first {
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

	// The queues exist: only now may any ring contain this node.
	epoch, records, err := n.monitor.Load().Join(ctx)
	if err != nil {
		return fmt.Errorf("service: node %s: join the membership: %w", n.id, err)
	}
	n.mu.Lock()
	n.epoch = epoch
	n.mu.Unlock()
	live := map[string]bool{n.id: true}
	for _, r := range records {
		live[r.Node] = true
		n.memberJoined(r.Node, r.Epoch, "membership")
	}
	for _, m := range n.ring.Members() { // a rejoining node may have missed leaves
		if !live[m] {
			n.mu.Lock()
			e := n.members[m]
			n.mu.Unlock()
			n.memberLeft(m, e, "not in the membership at rejoin", abandonCalls)
		}
	}
	n.memberJoined(n.id, epoch, "self")
	// The portal routes by the ring, so it starts once the ring is filled;
	// nothing routes to a node's portal, so starting it late loses nothing.
	if err := b.RegisterShared(ctx, bus.APIPortal, bus.HandlerFunc(n.portal)); err != nil {
		return fmt.Errorf("service: start node %s: %w", n.id, err)
	}
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
		_ = n.monitor.Load().Leave(ctx)
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
	if err := n.monitor.Load().Leave(ctx); err != nil {
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

// stopServing stops the services' consumers, deletes the node's queues
// and closes the bus. After an orderly leave (drained)
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

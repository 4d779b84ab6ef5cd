package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// Run starts the node and serves until ctx ends or the node is closed.
//
// Joining keeps one property: no ring ever contains a node before its
// queues exist. Run opens the bus, starts the services, declares every
// service queue, and only then registers the heartbeat record, fills its
// ring from the membership, starts consuming api.portal (whose messages
// it routes by that ring) and broadcasts NodeJoined; then Ready is
// closed. A start's call on the membership store that fails (reading
// its clock or registering; a call that timed out on a loaded database)
// is tried again after one beat interval, doubling up to EvictAfter,
// five times in all before Run returns the error.
//
// When ctx ends (or Close is called) the node leaves in order, keeping
// the mirror property: a leaving node leaves every ring before its queues
// are deleted. It removes itself from its own ring, deletes its record,
// broadcasts NodeLeft and has every peer confirm it dropped the node;
// then it drains its queues (every message sent before is handled),
// stops its services and deletes its queues. Run then returns nil.
//
// While the node cannot write its heartbeat for longer than the lease,
// it refuses messages about resources with message.ErrNotOwner (its
// lease expired: peers may soon evict it and take them over). If peers do evict
// it, it stops handling messages at once, tells the services'
// EvictionListeners, deletes its queues and, unless Config.NoRejoin is
// set, joins again with a new epoch (same UUID) one beat interval later;
// with NoRejoin, Run returns [ErrEvicted].
//
// The whole exit, from the moment ctx ends, takes at most
// Config.LeaveTimeout: the leave, closing the bus, the
// RingListeners' last delivery and the services' Stop share it (each
// of the last three gets at least a tenth of it). Closing a transport
// the node owns adds at most 2.2 s on RabbitMQ (the AMQP close
// handshake). With the default 10 s a node exits well within the 30 s
// grace a supervisor such as Kubernetes gives before it kills.
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
	n.runCtx = ctx
	n.mu.Unlock()
	stopExit := context.AfterFunc(ctx, func() {
		n.mu.Lock()
		n.exitStartedLocked()
		n.mu.Unlock()
	})
	defer stopExit()
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

	stop := n.cfg.Transport.WatchState(func(s driver.TransportState) {
		if m := n.monitor.Load(); m != nil {
			m.SetBusUp(s == driver.TransportConnected)
		}
	})
	defer stop()

	rejoins := 0
	for life := 1; ; life++ {
		err := n.live(ctx, life)
		rejoinFailed := errors.Is(err, errRejoin)
		if rejoinFailed {
			rejoins++
		} else {
			rejoins = 0
		}
		if !errors.Is(err, ErrEvicted) && !rejoinFailed || n.cfg.NoRejoin || ctx.Err() != nil {
			n.hooks.close()
			n.stopServices()
			if ctx.Err() != nil && (errors.Is(err, ErrEvicted) || rejoinFailed) {
				return nil // closed while evicted
			}
			return err
		}
		if rejoinFailed {
			// Typically the bus is still down (a zombie that was evicted):
			// try again until it heals.
			level := slog.LevelDebug
			if rejoins == 1 || rejoins%20 == 0 {
				level = slog.LevelWarn
			}
			n.log.Log(ctx, level, "rejoin failed; retrying", "attempts", rejoins, "err", err)
		} else {
			n.log.Warn("rejoining with a new epoch after eviction", "life", life+1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(n.cfg.Heartbeat.Interval):
		}
	}
}

// errRejoin marks a failed join of a later life (after an eviction):
// Run retries it instead of stopping.
var errRejoin = errors.New("service: rejoin failed")

// live is one life of the node: join, serve, and leave or be evicted.
func (n *Node) live(ctx context.Context, life int) error {
	n.setState(StateStarting)
	mon, err := heartbeat.NewMonitor(n.cfg.Store, n.id, n.heartbeatConfig(), heartbeat.ListenerFunc(n.onHeartbeat), n.cfg.Logger) // it adds the node itself
	if err != nil {
		return err
	}
	mon.SetBusUp(n.transportUp())
	n.monitor.Store(mon)
	if err := n.join(ctx, life == 1); err != nil {
		n.abort()
		if life > 1 && ctx.Err() == nil {
			return fmt.Errorf("%w: %w", errRejoin, err)
		}
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
	var loops sync.WaitGroup
	loops.Go(func() { n.reconcileLoop(lifeCtx) })
	loops.Go(func() { n.sweepLoop(lifeCtx) })

	runErr := mon.Run(lifeCtx)
	cancel()
	loops.Wait()
	if errors.Is(runErr, heartbeat.ErrEvicted) {
		n.setState(StateEvicted)
		n.log.Warn("evicted by peers: stopped serving; this node's queues stay for the survivors to drain")
		n.hooks.evicted()
		n.stopServing(false)
		// Recorded again once nothing here declares them any more:
		// survivors may have drained, deleted and forgotten them while
		// this node was cut off, and its consumers, cancelled by the
		// deletion, may have declared them again since.
		rctx, rcancel := context.WithTimeout(context.Background(), n.cfg.Heartbeat.WithDefaults().OpTimeout)
		n.recordQueues(rctx)
		rcancel()
		return ErrEvicted
	}
	n.setState(StateLeaving)
	n.leave()
	return nil
}

// exitContext returns the context of one step of the node's exit. Once
// Run's context ended, it ends reserve before the exit's deadline
// (leaving that much to the steps after it), but gives the step at least
// a tenth of LeaveTimeout; before that (a failed start, say) it ends
// after LeaveTimeout.
func (n *Node) exitContext(reserve time.Duration) (context.Context, context.CancelFunc) {
	budget := n.cfg.LeaveTimeout
	n.mu.Lock()
	if n.runCtx != nil && n.runCtx.Err() != nil {
		n.exitStartedLocked() // AfterFunc's goroutine may not have run yet
	}
	by := n.exitBy
	n.mu.Unlock()
	if !by.IsZero() {
		budget = min(budget, max(time.Until(by)-reserve, n.cfg.LeaveTimeout/10))
	}
	return context.WithTimeout(context.Background(), budget)
}

// exiting reports whether Run's context ended: the node is on its way out.
func (n *Node) exiting() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runCtx != nil && n.runCtx.Err() != nil
}

// exitStartedLocked starts the exit's clock, once; under mu.
func (n *Node) exitStartedLocked() {
	if n.exitBy.IsZero() {
		n.exitBy = time.Now().Add(n.cfg.LeaveTimeout)
	}
}

// closeReserve is what the leave leaves of the exit's time to the steps
// after it: closing the bus (its consumers wait for the broker up to 2 s
// on RabbitMQ), the listeners' last delivery, the services' Stop.
func (n *Node) closeReserve() time.Duration { return 3 * n.cfg.LeaveTimeout / 10 }

// stopServices runs the services' Stoppers once, when Run ends.
func (n *Node) stopServices() {
	ctx, cancel := n.exitContext(0)
	defer cancel()
	for _, s := range n.cfg.Services {
		if st, ok := s.(Stopper); ok {
			if err := st.Stop(ctx); err != nil {
				n.log.Warn("stop service", "service", s.Name(), "err", err)
			}
		}
	}
}

// join measures the cluster time, opens the bus, starts services (in
// the first life), declares the queues, joins the membership and fills
// the ring, in that order.
func (n *Node) join(ctx context.Context, first bool) error {
	// No message before the cluster time is known: one that waited in a
	// queue of this node (from its earlier life, before an eviction)
	// carries its deadline in cluster time, and without it the bus would
	// count the relative timeout from the arrival, as if it were fresh.
	if err := n.retryStore(ctx, "measure the cluster time", func() error { return n.monitor.Load().SyncClock(ctx) }); err != nil {
		return fmt.Errorf("service: start node %s: measure the cluster time before taking messages: %w", n.id, err)
	}
	b, err := bus.Open(ctx, bus.Config{Transport: n.cfg.Transport, Node: n.id, Prefix: n.cfg.Prefix, Registry: n.cfg.Registry,
		Clock: clockFunc(n.ClusterTime), Logger: n.cfg.Logger, Observer: n.cfg.Observer, Tracer: n.cfg.Tracer, Limits: n.cfg.Limits, Delivery: n.cfg.Delivery})
	if err != nil {
		return fmt.Errorf("service: start node %s: %w", n.id, err)
	}
	n.internal.Store(0) // counts this bus's
	n.bus.Store(b)

	// Lifecycle events are hints: each is checked against the store,
	// which is the truth (see onNodeJoined and onNodeLeft).
	if _, err := bus.Subscribe(b, func(ctx context.Context, ev wire.NodeJoined) {
		if ev.Node != n.id {
			n.onNodeJoined(ctx, ev)
		}
	}); err != nil {
		return err
	}
	if _, err := bus.Subscribe(b, func(ctx context.Context, ev wire.NodeLeft) {
		if ev.Node != n.id {
			n.onNodeLeft(ctx, ev)
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
	// Recorded before they are declared: a queue of this node exists only
	// while the store records it, so survivors find every queue of a
	// start that fails or is killed half-way (the sweep waits
	// drainGraceBeats before deleting a starting node's queues).
	if err := n.cfg.Store.AddQueues(ctx, n.id, n.ownQueues(b)); err != nil {
		return fmt.Errorf("service: start node %s: record its queues in the store: %w", n.id, err)
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
	var epoch int64
	var records []heartbeat.Record
	err = n.retryStore(ctx, "join the membership", func() (err error) {
		epoch, records, err = n.monitor.Load().Join(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("service: node %s: join the membership: %w", n.id, err)
	}
	n.mu.Lock()
	n.epoch = epoch
	n.mu.Unlock()
	live := map[string]int64{}
	for _, r := range records {
		live[r.Node] = r.Epoch
	}
	for _, m := range n.ring.Members() { // a rejoining node may have missed leaves
		if _, ok := live[m]; !ok && m != n.id {
			n.mu.Lock()
			e := n.members[m]
			n.mu.Unlock()
			n.memberLeft(m, e, "not in the membership at rejoin", abandonCalls)
		}
	}
	live[n.id] = epoch
	n.membersJoined(live, "membership") // one ring change for every member
	// The portal routes by the ring, so it starts once the ring is filled;
	// nothing routes to a node's portal, so starting it late loses nothing.
	if err := busx.Of(b).RegisterRaw(ctx, bus.APIPortal, handlerFunc(n.portal)); err != nil {
		return fmt.Errorf("service: start node %s: %w", n.id, err)
	}
	if err := b.Broadcast(ctx, wire.NodeJoined{Node: n.id, Epoch: epoch}); err != nil {
		n.log.Warn("broadcast NodeJoined failed; peers will add this node from the membership store", "err", err)
	}
	return nil
}

// storeAttempts is how many times a start tries each of its steps on
// the membership store before it fails.
const storeAttempts = 5

// retryStore runs step, a start's call on the membership store, until
// it succeeds. One that fails (a store call that timed out on a loaded
// database, a lost connection, the node's session lock held by a peer
// testing it) is tried again after one beat interval, doubling up to
// EvictAfter, storeAttempts times in all; one that finds the node's
// record gone right after registering it (another process runs as this
// node) or the monitor closed is not.
func (n *Node) retryStore(ctx context.Context, what string, step func() error) error {
	hb := n.cfg.Heartbeat.WithDefaults()
	wait := hb.Interval
	for attempt := 1; ; attempt++ {
		err := step()
		if err == nil || attempt == storeAttempts || ctx.Err() != nil ||
			errors.Is(err, heartbeat.ErrEvicted) || errors.Is(err, heartbeat.ErrClosed) {
			return err
		}
		n.log.Warn(what+" failed; retrying", "attempt", attempt, "of", storeAttempts, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after attempt %d: %w)", ctx.Err(), attempt, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, hb.EvictAfter)
	}
}

// abort undoes a failed start: nothing routed to this node by ring yet,
// so its queues go at once if they are empty (a queue that holds
// messages, from an earlier life, stays for the next life or the
// survivors).
func (n *Node) abort() {
	ctx, cancel := n.exitContext(n.closeReserve())
	defer cancel()
	if n.Epoch() != 0 {
		_ = n.monitor.Load().Leave(ctx)
	}
	n.stopServing(true)
}

// leave is the orderly goodbye; see Run. It leaves its own ring,
// broadcasts NodeLeft and asks only the peers whose heartbeat record is
// fresh to confirm they dropped it (a dead peer not yet evicted would
// never answer), drains its queues with markers, moves whatever arrived
// after the markers to the resources' new owners, deletes each queue
// once it is empty, and only then deletes its heartbeat record. A queue
// it could not empty in time stays, recorded in the store, for the
// survivors to drain.
func (n *Node) leave() {
	ctx, cancel := n.exitContext(n.closeReserve())
	defer cancel()
	start := time.Now()
	epoch := n.Epoch()
	n.memberLeft(n.id, epoch, "leaving", keepCalls)
	peers := n.freshPeers()
	b := n.Bus()
	if err := b.Broadcast(ctx, wire.NodeLeft{Node: n.id, Epoch: epoch, Reason: wire.LeaveGoodbye}); err != nil {
		n.log.Warn("leave: broadcast NodeLeft", "err", err)
	}
	silent := n.confirmLeave(ctx, peers, epoch)
	for _, p := range silent {
		// A peer that cannot answer a round trip will not answer the
		// calls this node's handlers (its portal, say) wait on either:
		// end them now, outcome unknown, rather than hold the drain
		// until the peer is evicted.
		n.abandon(p, time.Time{}, "it did not confirm this node's leave")
	}
	confirmed := len(peers) - len(silent)
	if err := busx.Of(b).Drain(ctx); err != nil {
		n.log.Warn("leave: drain queues", "err", err)
	}
	moved, kept := n.emptyOwnQueues(ctx)
	// The record goes last: while it is there, no survivor drains this
	// node's queues alongside it (peers dropped it from their rings when
	// they confirmed, and do not add it back for a life seen leaving).
	if err := n.monitor.Load().Leave(ctx); err != nil {
		n.log.Warn("leave: delete heartbeat record", "err", err)
	}
	n.stopServing(false)
	n.log.Info("node left", "peers", len(peers), "confirmed", confirmed, "moved", moved, "queues_kept", kept,
		"took", time.Since(start).Round(time.Millisecond))
}

// transportUp reports whether the node's transport is connected.
func (n *Node) transportUp() bool {
	return n.cfg.Transport.State() == driver.TransportConnected
}

// freshPeers returns the other ring members, but those whose heartbeat
// record the last read of the store shows stale (older than the lease:
// their lease expired, or they are dead and about to be evicted, and would not
// answer). A member the read does not show, having joined since, counts
// as fresh.
func (n *Node) freshPeers() []string {
	records, _ := n.monitor.Load().View()
	lease := n.cfg.Heartbeat.WithDefaults().Lease
	stale := make(map[string]bool)
	for _, r := range records {
		if r.Age > lease {
			stale[r.Node] = true
		}
	}
	var out []string
	for _, p := range n.ring.Members() {
		if p != n.id && !stale[p] {
			out = append(out, p)
		}
	}
	return out
}

// stopServing closes the bus; with deleteIdle it first deletes the
// node's queues that are empty and unused (after a failed start). An
// evicted node keeps its queues: survivors drain them, or the node's
// next life consumes them again.
func (n *Node) stopServing(deleteIdle bool) {
	b := n.Bus()
	if b == nil {
		return
	}
	ctx, cancel := n.exitContext(n.closeReserve() / 2)
	defer cancel()
	closeBus := b.Close // its queue deletions bounded by the bus's ReplyTimeout
	if n.exiting() {
		closeBus = func() error { return busx.Of(b).CloseWithin(ctx) } // by the exit's deadline
	}
	if err := closeBus(); err != nil {
		n.log.Warn("close bus", "err", err)
	}
	if !deleteIdle {
		return
	}
	var gone []string
	for _, q := range n.ownQueues(b) {
		if err := n.cfg.Transport.DeleteQueueIfIdle(ctx, q); err != nil {
			n.log.Debug("queue kept", "queue", q, "err", err)
			continue
		}
		gone = append(gone, q)
	}
	n.forgetQueues(ctx, n.id, gone)
}

// heartbeatConfig is the node's heartbeat configuration; with session
// locks, a peer whose session lock is free is evicted for it only if the
// broker also dropped its consumers (its membership queue has none, or
// is gone): a dead process loses both at once, while a live node whose
// database connection was reset keeps its consumers.
func (n *Node) heartbeatConfig() heartbeat.Config {
	hb := n.cfg.Heartbeat
	cc, ok := n.cfg.Transport.(driver.ConsumerCounter)
	if !hb.SessionLocks || hb.ConfirmDead != nil || !ok {
		return hb
	}
	hb.ConfirmDead = func(ctx context.Context, node string) (bool, error) {
		b := n.bus.Load()
		if b == nil {
			return false, errors.New("service: the bus is not open")
		}
		c, err := cc.Consumers(ctx, busx.Of(b).QueueName(bus.ServiceID(membershipService, node)))
		if errors.Is(err, message.ErrNoRoute) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return c == 0, nil
	}
	return hb
}

package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
)

// DrainStats counts what a node did with the queues of nodes that died,
// were evicted or left without emptying their queues.
type DrainStats struct {
	// Queues is the number of such queues this node emptied and deleted.
	Queues int
	// Moved is the number of messages it moved to the resources' current
	// owners.
	Moved int
	// Late is the number of messages it dropped because their sender's
	// deadline had passed.
	Late int
	// Dropped is the number of messages it dropped as undecodable or
	// internal (a dead node's membership messages).
	Dropped int
}

// DrainStats returns what this node drained so far, in all its lives.
func (n *Node) DrainStats() DrainStats {
	n.drainMu.Lock()
	defer n.drainMu.Unlock()
	return n.drained
}

// errNodeBack ends the drain of a node that is a member again.
var errNodeBack = errors.New("service: the node is back in the ring; it consumes its queues itself")

// ownQueues returns the durable queues of this node's services, the
// internal membership service included.
func (n *Node) ownQueues(b *bus.CloudBus) []string {
	qs := []string{busx.Of(b).QueueName(bus.ServiceID(membershipService, n.id))}
	for _, s := range n.cfg.Services {
		qs = append(qs, busx.Of(b).QueueName(bus.ServiceID(s.Name(), n.id)))
	}
	return qs
}

// recordQueues records this node's queues in the store, so that
// survivors find them if this node dies.
func (n *Node) recordQueues(ctx context.Context) {
	b := n.Bus()
	if b == nil {
		return
	}
	if err := n.cfg.Store.AddQueues(ctx, n.id, n.ownQueues(b)); err != nil {
		n.log.Warn("record this node's queues in the store (survivors could not drain them if it died)", "err", err)
	}
}

// forgetQueues removes queues of node from the store's records.
func (n *Node) forgetQueues(ctx context.Context, node string, queues []string) {
	if len(queues) == 0 {
		return
	}
	if err := n.cfg.Store.RemoveQueues(ctx, node, queues); err != nil {
		n.log.Warn("forget deleted queues in the store", "node", node, "err", err)
	}
}

// emptyOwnQueues moves what is left in this leaving node's queues (sent
// after its drain markers) to the resources' owners and deletes the
// queues; it returns how many messages it moved and how many queues it
// had to keep.
func (n *Node) emptyOwnQueues(ctx context.Context) (moved, kept int) {
	b := n.Bus()
	var gone []string
	for _, q := range n.ownQueues(b) {
		st, err := busx.Of(b).Reroute(ctx, q, n.rerouteTarget(n.id), false)
		moved += st.Moved
		if err != nil {
			kept++
			n.log.Warn("leave: queue kept for the survivors to drain", "queue", q, "err", err)
			continue
		}
		gone = append(gone, q)
	}
	n.forgetQueues(ctx, n.id, gone)
	return moved, kept
}

// rerouteTarget returns the route function that moves a message of
// node's queue (a node that left, or this node leaving) to the service
// on the current owner of its resource, or for a message about no
// resource to a member chosen by its id. A dead node's membership
// messages are dropped; if node is a member again, draining stops.
func (n *Node) rerouteTarget(node string) func(env *wire.Envelope) error {
	return func(env *wire.Envelope) error {
		svc, _, ok := bus.SplitServiceID(env.ServiceID)
		if !ok || svc == membershipService {
			return busx.ErrDrop
		}
		if node != n.id && slices.Contains(n.ring.Members(), node) {
			return errNodeBack
		}
		key := env.ResourceUUID
		if key == "" {
			key = env.ID // any member may handle it: spread them
		}
		owner, err := n.ring.Locate(key)
		if err != nil {
			return fmt.Errorf("no member to move it to: %w: %w", message.ErrNoRoute, err)
		}
		env.ServiceID = bus.ServiceID(svc, owner)
		if env.ResourceUUID != "" {
			h := make(map[string]string, len(env.Headers)+1)
			for k, v := range env.Headers {
				h[k] = v
			}
			h[wire.HeaderOwner] = owner
			env.Headers = h
		}
		return nil
	}
}

// kickSweep asks the sweep loop for a sweep now.
func (n *Node) kickSweep() {
	select {
	case n.sweepNow <- struct{}{}:
	default:
	}
}

// sweepLoop drains the queues of nodes that are no longer members: at
// the start of each life, when a node leaves or is evicted, and every
// EvictAfter. Each absent node's queues are drained by one node, the
// owner of its UUID on the ring, so survivors do not compete; if that
// node dies too, the next owner takes over at its next sweep.
func (n *Node) sweepLoop(ctx context.Context) {
	period := n.cfg.Heartbeat.WithDefaults().EvictAfter
	t := time.NewTicker(period)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	drains := map[string]context.CancelFunc{}
	absent := map[string]time.Time{} // when this node first found each absent node's queues
	done := make(chan string, 16)
	for {
		n.sweep(ctx, drains, absent, done, &wg)
		for next := false; !next; {
			select {
			case <-ctx.Done():
				for _, cancel := range drains {
					cancel()
				}
				return
			case <-t.C:
				next = true
			case <-n.sweepNow:
				next = true
			case node := <-done:
				// A drain that kept its queues runs again at the next
				// sweep, not at once.
				delete(drains, node)
			}
		}
	}
}

// drainGraceBeats is how many EvictAfter periods a node must have been
// absent before its queues are deleted, not only drained: see sweep.
const drainGraceBeats = 3

// sweep starts the drains this node owes and stops those of nodes that
// came back. It runs on the sweep loop's goroutine.
//
// A drain moves the messages of an absent node's queues to their
// resources' owners at once, but deletes the queues only once this node
// has found the node absent for drainGraceBeats × EvictAfter (9 s by
// default), draining them again at every sweep meanwhile: RabbitMQ
// confirms a message published to a queue that is deleted while the
// message is on its way, and drops it, so a queue must not be deleted
// while someone may still publish to it. An evicted node that rejoins
// (within seconds of learning it was evicted) consumes its queues again,
// and senders whose rings still named it have long caught up when the
// queues go.
func (n *Node) sweep(ctx context.Context, drains map[string]context.CancelFunc, absent map[string]time.Time, done chan<- string, wg *sync.WaitGroup) {
	if n.State() != StateServing || n.Fenced() {
		return
	}
	n.recordQueues(ctx)
	// The queues first, then the records: a node records its queues
	// after registering, so one whose queues are read here and that is
	// still a member shows in the records read after.
	opTimeout := n.cfg.Heartbeat.WithDefaults().OpTimeout
	opCtx, cancel := context.WithTimeout(ctx, opTimeout)
	all, err := n.cfg.Store.Queues(opCtx)
	cancel()
	if err != nil {
		n.log.Debug("sweep: read the recorded queues", "err", err)
		return
	}
	opCtx, cancel = context.WithTimeout(ctx, opTimeout)
	records, err := n.cfg.Store.List(opCtx)
	cancel()
	if err != nil {
		n.log.Debug("sweep: list the members", "err", err)
		return
	}
	live := map[string]bool{n.id: true}
	for _, r := range records {
		live[r.Node] = true
	}
	for node, cancel := range drains {
		if owner, err := n.ring.Locate(node); live[node] || err != nil || owner != n.id {
			cancel() // it came back (it consumes its queues itself), or another node drains it now
		}
	}
	members := n.ring.Members()
	now := time.Now()
	grace := drainGraceBeats * n.cfg.Heartbeat.WithDefaults().EvictAfter
	for node := range absent {
		if _, recorded := all[node]; !recorded || live[node] || slices.Contains(members, node) {
			delete(absent, node)
		}
	}
	for node, queues := range all {
		if live[node] || slices.Contains(members, node) || drains[node] != nil {
			continue
		}
		if owner, err := n.ring.Locate(node); err != nil || owner != n.id {
			delete(absent, node) // another node drains it now
			continue
		}
		since, ok := absent[node]
		if !ok {
			since = now
			absent[node] = now
		}
		deleteQueues := now.Sub(since) >= grace
		dctx, cancel := context.WithCancel(ctx)
		drains[node] = cancel
		wg.Go(func() {
			defer cancel()
			n.drain(dctx, node, queues, deleteQueues)
			select {
			case done <- node:
			case <-ctx.Done():
			}
		})
	}
}

// drain moves the messages of node's queues to their current owners and,
// with deleteQueues, deletes the queues, forgetting them in the store.
func (n *Node) drain(ctx context.Context, node string, queues []string, deleteQueues bool) {
	b := n.Bus()
	if b == nil {
		return
	}
	start := time.Now()
	var total busx.RerouteStats
	var gone []string
	for _, q := range queues {
		st, err := busx.Of(b).Reroute(ctx, q, n.rerouteTarget(node), !deleteQueues)
		total.Moved += st.Moved
		total.Late += st.Late
		total.Dropped += st.Dropped
		if err != nil {
			if !errors.Is(err, errNodeBack) && ctx.Err() == nil {
				n.log.Warn("drain: queue of a node that left not emptied yet; next sweep retries", "peer", node, "queue", q, "err", err)
			}
			continue
		}
		if deleteQueues {
			gone = append(gone, q)
		}
	}
	if len(gone) > 0 && ctx.Err() == nil {
		opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.Heartbeat.WithDefaults().OpTimeout)
		if err := n.cfg.Store.RemoveQueues(opCtx, node, gone); err != nil {
			n.log.Warn("drain: forget the deleted queues", "peer", node, "err", err)
		}
		cancel()
	}
	n.drainMu.Lock()
	n.drained.Queues += len(gone)
	n.drained.Moved += total.Moved
	n.drained.Late += total.Late
	n.drained.Dropped += total.Dropped
	n.drainMu.Unlock()
	if total != (busx.RerouteStats{}) || len(gone) > 0 {
		n.log.Info("drained the queues of a node that left", "peer", node, "queues", len(gone), "of", len(queues),
			"moved", total.Moved, "late", total.Late, "dropped", total.Dropped, "took", time.Since(start).Round(time.Millisecond))
	}
}

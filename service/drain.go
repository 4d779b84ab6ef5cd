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

// DrainStats counts what a node did with the queues of nodes that left
// without emptying them.
type DrainStats struct {
	// Queues counts the queues emptied and deleted.
	Queues int
	// Moved counts messages moved to their resources' owners.
	Moved int
	// Late counts messages dropped or dead-lettered as late.
	Late int
	// Dropped counts undecodable or internal messages dropped.
	Dropped int
}

// DrainStats returns what this node drained, in all its lives.
func (n *Node) DrainStats() DrainStats {
	n.drainMu.Lock()
	defer n.drainMu.Unlock()
	return n.drained
}

var errNodeBack = errors.New("service: the node is back in the ring; it consumes its queues itself")

func (n *Node) ownQueues(b *bus.CloudBus) []string {
	qs := []string{busx.Of(b).QueueName(bus.ServiceID(membershipService, n.id))}
	for _, s := range n.cfg.Services {
		qs = append(qs, busx.Of(b).QueueName(bus.ServiceID(s.Name(), n.id)))
	}
	return qs
}

func (n *Node) recordQueues(ctx context.Context) {
	b := n.Bus()
	if b == nil {
		return
	}
	if err := n.cfg.Store.AddQueues(ctx, n.id, n.ownQueues(b)); err != nil {
		n.log.Warn("record this node's queues in the store (survivors could not drain them if it died)", "err", err)
	}
}

func (n *Node) forgetQueues(ctx context.Context, node string, queues []string) {
	if len(queues) == 0 {
		return
	}
	if err := n.cfg.Store.RemoveQueues(ctx, node, queues); err != nil {
		n.log.Warn("forget deleted queues in the store", "node", node, "err", err)
	}
}

// emptyOwnQueues returns the messages moved and the queues kept.
func (n *Node) emptyOwnQueues(ctx context.Context) (moved, kept int) {
	b := n.Bus()
	var gone []string
	for _, q := range n.ownQueues(b) {
		m, err := n.rerouteOwn(ctx, b, q)
		moved += m
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

// rerouteOwn empties q, one of this node's queues, as it leaves. A
// broker connection lost meanwhile ends the attempt; it tries again once
// the connection is back, up to three attempts within ctx.
func (n *Node) rerouteOwn(ctx context.Context, b *bus.CloudBus, q string) (moved int, err error) {
	for attempt := 1; ; attempt++ {
		st, err := busx.Of(b).Reroute(ctx, q, n.rerouteTarget(n.id), false)
		moved += st.Moved
		if err == nil || attempt == 3 || !errors.Is(err, message.ErrUnavailable) {
			return moved, err
		}
		n.log.Info("leave: the broker connection dropped while emptying a queue; trying again once it is back", "queue", q, "err", err)
		t := time.NewTicker(50 * time.Millisecond)
		for !n.transportUp() {
			select {
			case <-ctx.Done():
				t.Stop()
				return moved, err
			case <-t.C:
			}
		}
		t.Stop()
	}
}

// rerouteTarget fails once node is a member again.
func (n *Node) rerouteTarget(node string) func(env *wire.Envelope) error {
	return func(env *wire.Envelope) error {
		svc, _, ok := bus.SplitServiceID(env.ServiceID)
		if !ok || svc == membershipService {
			return busx.ErrDrop
		}
		if node != n.id && slices.Contains(n.ring.Members(), node) {
			return errNodeBack
		}
		return n.routeToOwner(env, svc)
	}
}

// routeToOwner addresses env to service svc on the ring's owner of its
// resource, or of its id if it names none (any member may handle it:
// spread them).
func (n *Node) routeToOwner(env *wire.Envelope, svc string) error {
	key := env.ResourceUUID
	if key == "" {
		key = env.ID
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

func (n *Node) kickSweep() {
	select {
	case n.sweepNow <- struct{}{}:
	default:
	}
}

// sweepLoop drains absent nodes' queues, each node's by the owner of its
// UUID (docs/design.md, "Delivery rules").
func (n *Node) sweepLoop(ctx context.Context) {
	period := n.cfg.Heartbeat.WithDefaults().EvictAfter
	t := time.NewTicker(period)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	drains := map[string]context.CancelFunc{}
	absent := map[string]time.Time{} // when this node first found each absent node's queues
	seen := map[string]bool{}        // nodes this node saw live or in its ring
	done := make(chan string, 16)
	for {
		n.sweep(ctx, drains, absent, seen, done, &wg)
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
				delete(drains, node)
			}
		}
	}
}

// drainGraceBeats × EvictAfter after a node left, its queues are deleted.
const drainGraceBeats = 3

// After stuckDrains failed drains in a row of a queue of a node that
// left (one a sweep, every EvictAfter: every drain of the grace failed),
// the sweep deletes it if it is idle without consuming it.
const stuckDrains = drainGraceBeats

func (n *Node) drainFailures(q string) int {
	n.drainMu.Lock()
	defer n.drainMu.Unlock()
	return n.drainFails[q]
}

// setDrainFailures counts one more failed drain of q, or forgets q's
// count.
func (n *Node) setDrainFailures(q string, failed bool) {
	n.drainMu.Lock()
	defer n.drainMu.Unlock()
	if !failed {
		delete(n.drainFails, q)
		return
	}
	if n.drainFails == nil {
		n.drainFails = map[string]int{}
	}
	n.drainFails[q]++
}

func (n *Node) sweep(ctx context.Context, drains map[string]context.CancelFunc, absent map[string]time.Time, seen map[string]bool, done chan<- string, wg *sync.WaitGroup) {
	if n.State() != StateServing || n.LeaseExpired() {
		return
	}
	n.recordQueues(ctx)
	// Queue records before heartbeat records: a leaving node forgets its
	// queues before its heartbeat record, so a node seen with queues and
	// without a record has left or died. A starting node records its
	// queues just before it joins: it looks absent for that moment, and
	// its queues are only deleted after drainGraceBeats.
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
	evictAfter := n.cfg.Heartbeat.WithDefaults().EvictAfter
	grace := drainGraceBeats * evictAfter
	for node := range absent {
		if _, recorded := all[node]; !recorded || live[node] || slices.Contains(members, node) {
			delete(absent, node)
		}
	}
	for node := range live {
		seen[node] = true
	}
	for _, node := range members {
		seen[node] = true
	}
	for node := range seen {
		if _, recorded := all[node]; !recorded && !live[node] && !slices.Contains(members, node) {
			delete(seen, node)
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
		if !seen[node] && now.Sub(since) < evictAfter/2 {
			// Never seen live: it may be starting (its queues are
			// recorded before its heartbeat; it joins within moments).
			// Draining it would consume its queues beside it and leave
			// this drain's markers circling in them for markerTTL. A
			// node this one never saw (it died before this one began
			// sweeping, or lived between two sweeps) is drained a sweep
			// later.
			continue
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

func (n *Node) drain(ctx context.Context, node string, queues []string, deleteQueues bool) {
	b := n.Bus()
	if b == nil {
		return
	}
	start := time.Now()
	var total busx.RerouteStats
	var gone []string
	for _, q := range queues {
		if deleteQueues && n.drainFailures(q) >= stuckDrains {
			// A queue no drain could consume (RabbitMQ 3.10 can keep a
			// quorum queue whose replicas a deletion removed while one of
			// its broker nodes restarted: each basic.consume on it fails
			// the whole connection with INTERNAL_ERROR): delete it if it
			// is idle, without consuming it.
			if err := busx.Of(b).DeleteQueueIfIdle(ctx, q); err == nil {
				n.log.Warn("drain: deleted an idle queue of a node that left without consuming it, after drains in a row failed", "peer", node, "queue", q,
					"failed_drains", n.drainFailures(q))
				n.setDrainFailures(q, false)
				gone = append(gone, q)
				continue
			}
		}
		st, err := busx.Of(b).Reroute(ctx, q, n.rerouteTarget(node), !deleteQueues)
		n.setDrainFailures(q, err != nil && !errors.Is(err, errNodeBack) && ctx.Err() == nil)
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

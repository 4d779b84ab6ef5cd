package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/ring"
)

const membershipService = "cloudbus-membership"

// maxTombstones bounds the departed lives remembered.
const maxTombstones = 4096

// memberJoined adds a life unless it, or a later one, left.
func (n *Node) memberJoined(node string, epoch int64, why string) {
	n.mu.Lock()
	if e, ok := n.gone[node]; ok && epoch <= e {
		n.mu.Unlock()
		return
	}
	if e, ok := n.members[node]; ok && e >= epoch {
		n.mu.Unlock()
		return
	}
	n.members[node] = epoch
	delete(n.goodbye, node) // a new life: a goodbye of an earlier one no longer applies
	err := n.ring.Add(node)
	if err == nil {
		n.signalLocked()
	}
	n.mu.Unlock()
	if err != nil && !errors.Is(err, ring.ErrMemberExists) {
		n.log.Error("ring add failed", "member", node, "err", err)
		return
	}
	if err == nil {
		n.mstats.joined.Add(1)
		n.log.Debug("ring: member joined", "member", node, "epoch", epoch, "why", why, "fingerprint", n.ring.Fingerprint())
		n.hooks.ringChanged(node, true)
	}
}

// membersJoined adds the lives of lives (node -> epoch) as memberJoined
// adds each, in one change of a ring that can replace its members (a
// starting node's ring filled from the store: at 100 members, 100 adds
// cost about 0.4 s of CPU, one replacement about 60 ms).
func (n *Node) membersJoined(lives map[string]int64, why string) {
	rp, ok := n.ring.(ring.Replacer)
	if !ok {
		for _, node := range slices.Sorted(maps.Keys(lives)) {
			n.memberJoined(node, lives[node], why)
		}
		return
	}
	n.mu.Lock()
	before := n.ring.Members()
	want := slices.Clone(before)
	var added []string
	for _, node := range slices.Sorted(maps.Keys(lives)) {
		epoch := lives[node]
		if e, ok := n.gone[node]; ok && epoch <= e {
			continue
		}
		if e, ok := n.members[node]; ok && e >= epoch {
			continue
		}
		n.members[node] = epoch
		delete(n.goodbye, node) // a new life: a goodbye of an earlier one no longer applies
		if !slices.Contains(before, node) {
			want = append(want, node)
			added = append(added, node)
		}
	}
	var err error
	if len(added) > 0 {
		if err = rp.Replace(want); err == nil {
			n.signalLocked()
		}
	}
	n.mu.Unlock()
	if err != nil {
		n.log.Error("ring replace failed", "members", len(want), "err", err)
		return
	}
	for _, node := range added {
		n.mstats.joined.Add(1)
		n.log.Debug("ring: member joined", "member", node, "epoch", lives[node], "why", why, "fingerprint", n.ring.Fingerprint())
		n.hooks.ringChanged(node, true)
	}
}

// How memberLeft treats the calls pending towards the node.
const (
	keepCalls    = iota // a goodbye: the node drains and replies to them
	abandonCalls        // it died: fail them now with node-left
	abandonLater        // unknown (its record vanished): fail them after LeaveTimeout
)

// memberLeft removes a life; calls says what its pending calls get.
func (n *Node) memberLeft(node string, epoch int64, why string, calls int) {
	n.mu.Lock()
	if e, ok := n.members[node]; ok && e > epoch {
		n.mu.Unlock()
		return // a newer life of node is in: this leave is stale
	}
	if e, ok := n.gone[node]; !ok || epoch > e {
		if len(n.gone) >= maxTombstones {
			for k := range n.gone { // drop an arbitrary old one
				delete(n.gone, k)
				delete(n.goodbye, k)
				break
			}
		}
		n.gone[node] = epoch
	}
	if calls == keepCalls {
		n.goodbye[node] = true // the node said it leaves: its record goes soon
	}
	_, was := n.members[node]
	delete(n.members, node)
	err := n.ring.Remove(node)
	if err == nil {
		n.signalLocked()
	}
	if calls == abandonLater && node != n.id {
		now := time.Now()
		n.abandonAt[node] = abandonment{at: now.Add(n.cfg.LeaveTimeout), left: now}
	}
	n.mu.Unlock()
	if calls == abandonCalls && node != n.id {
		n.abandon(node, time.Time{}, why)
	}
	if err != nil && !errors.Is(err, ring.ErrMemberNotFound) {
		n.log.Error("ring remove failed", "member", node, "err", err)
	}
	if was && err == nil {
		n.mstats.left.Add(1)
		n.log.Debug("ring: member left", "member", node, "epoch", epoch, "why", why, "fingerprint", n.ring.Fingerprint())
		n.hooks.ringChanged(node, false)
	}
}

// abandonment is when the calls to a node whose record vanished are
// failed, and when it vanished: only calls sent before then are failed,
// not those to a life of the node that joined since.
type abandonment struct{ at, left time.Time }

// abandon fails the calls pending towards node (sent before before, if
// it is not zero) with node-left.
func (n *Node) abandon(node string, before time.Time, why string) {
	if b := n.Bus(); b != nil {
		if k := busx.Of(b).AbandonCalls(node, before, fmt.Errorf("node %s left: %s", node, why)); k > 0 {
			n.log.Info("calls towards a node that left failed with node-left", "member", node, "calls", k)
		}
	}
}

// abandonDue fails calls to nodes whose record vanished LeaveTimeout ago.
func (n *Node) abandonDue(now time.Time) {
	n.mu.Lock()
	due := map[string]time.Time{}
	for node, a := range n.abandonAt {
		if !now.Before(a.at) {
			due[node] = a.left
			delete(n.abandonAt, node)
		}
	}
	n.mu.Unlock()
	for node, left := range due {
		n.abandon(node, left, "its membership record vanished")
	}
}

// onHeartbeat runs on the monitor's goroutine: it must not block long.
func (n *Node) onHeartbeat(ev heartbeat.Event) {
	r := ev.Record
	switch ev.Kind {
	case heartbeat.Joined:
		n.memberJoined(r.Node, r.Epoch, "membership")
	case heartbeat.Left:
		n.memberLeft(r.Node, r.Epoch, "membership record gone", abandonLater)
		n.kickSweep()
	case heartbeat.Evicted:
		n.mstats.evicted.Add(1)
		if r.BusDown > 0 && r.Age <= n.cfg.Heartbeat.WithDefaults().EvictAfter {
			n.log.Warn("evicted a node cut off from the bus", "member", r.Node, "bus_down", r.BusDown)
		} else {
			n.log.Warn("evicted a node that stopped beating", "member", r.Node, "age", r.Age)
		}
		n.memberLeft(r.Node, r.Epoch, "evicted by this node", abandonCalls)
		n.kickSweep()
		if b := n.Bus(); b != nil {
			ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Heartbeat.OpTimeout+time.Second)
			err := b.Broadcast(ctx, wire.NodeLeft{Node: r.Node, Epoch: r.Epoch, Reason: wire.LeaveEvicted, By: n.id})
			cancel()
			if err != nil {
				n.log.Warn("broadcast NodeLeft failed; peers will drop the node from the membership store", "member", r.Node, "err", err)
			}
		}
	case heartbeat.SelfEvicted:
		n.setState(StateEvicted) // stop handling at once; Run cleans up
	}
}

// reconcileLoop heals the ring from the store (docs/design.md, "Heartbeats
// and eviction").
func (n *Node) reconcileLoop(ctx context.Context) {
	interval := n.cfg.Heartbeat.Interval
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastDiff ring.Fingerprint
	var lastLists uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.abandonDue(time.Now())
		if n.State() != StateServing {
			continue
		}
		records, lists := n.monitor.Load().View()
		if lists == lastLists {
			continue // no new read of the store since the last check
		}
		lastLists = lists
		want := map[string]int64{n.id: n.Epoch()}
		for _, r := range records {
			want[r.Node] = r.Epoch
		}
		ids := make([]string, 0, len(want))
		for id := range want {
			ids = append(ids, id)
		}
		fp := ring.FingerprintOf(ids)
		if fp == n.ring.Fingerprint() {
			lastDiff = 0
			continue
		}
		if fp != lastDiff {
			lastDiff = fp // first sighting: give events one read to arrive
			continue
		}
		n.log.Warn("ring differs from the membership store in two reads: reconciling", "ring", n.ring.Fingerprint(), "store", fp)
		for _, id := range n.ring.Members() {
			if _, ok := want[id]; !ok {
				n.mu.Lock()
				e := n.members[id]
				n.mu.Unlock()
				n.memberLeft(id, e, "reconciled from the store", abandonCalls)
			}
		}
		for id, e := range want {
			n.mu.Lock()
			if g, ok := n.gone[id]; ok && g >= e && !n.goodbye[id] {
				delete(n.gone, id)
				n.log.Warn("re-adding a live member dropped on a stale view of the store", "member", id, "epoch", e)
			}
			n.mu.Unlock()
			n.memberJoined(id, e, "reconciled from the store")
		}
		lastDiff = 0
	}
}

func (n *Node) membershipHandler() bus.Handler {
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, l wire.LeaveNotice) (message.Empty, error) {
		n.internal.Add(1)
		n.memberLeft(l.Node, l.Epoch, "leave notice", keepCalls)
		return message.Empty{}, nil
	})
	bus.Handle(mux, func(ctx context.Context, _ *bus.Request, q wire.RingQuery) (wire.RingState, error) {
		st := n.ringState(q) // before counting this query, which the bus counts once it returns
		n.internal.Add(1)
		return st, nil
	})
	return mux
}

// confirmLeave returns the peers that did not confirm in two beats.
func (n *Node) confirmLeave(ctx context.Context, peers []string, epoch int64) (silent []string) {
	ctx, cancel := context.WithTimeout(ctx, 2*n.cfg.Heartbeat.WithDefaults().Interval)
	defer cancel()
	b := n.Bus()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, p := range peers {
		if p == n.id {
			continue
		}
		wg.Go(func() {
			_, err := bus.Call[any](ctx, b, bus.ServiceID(membershipService, p), wire.LeaveNotice{Node: n.id, Epoch: epoch})
			if err != nil {
				n.log.Warn("leave: peer did not confirm", "peer", p, "err", err)
				mu.Lock()
				silent = append(silent, p)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return silent
}

func (n *Node) record(ctx context.Context, node string) (heartbeat.Record, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Heartbeat.WithDefaults().OpTimeout)
	defer cancel()
	records, err := n.cfg.Store.List(ctx)
	if err != nil {
		return heartbeat.Record{}, false, err
	}
	for _, r := range records {
		if r.Node == node {
			return r, true, nil
		}
	}
	return heartbeat.Record{}, false, nil
}

// onNodeJoined and onNodeLeft apply an event the store confirms.
func (n *Node) onNodeJoined(ctx context.Context, ev wire.NodeJoined) {
	r, found, err := n.record(ctx, ev.Node)
	switch {
	case err != nil:
		n.log.Debug("NodeJoined not checked against the store; the next store read decides", "member", ev.Node, "epoch", ev.Epoch, "err", err)
	case !found || r.Epoch != ev.Epoch:
		n.log.Warn("ignored a NodeJoined that the store contradicts (replayed or forged)", "member", ev.Node, "epoch", ev.Epoch,
			"store_has_record", found, "store_epoch", r.Epoch)
	default:
		n.memberJoined(ev.Node, ev.Epoch, "broadcast")
	}
}

func (n *Node) onNodeLeft(ctx context.Context, ev wire.NodeLeft) {
	r, found, err := n.record(ctx, ev.Node)
	switch {
	case err != nil:
		n.log.Debug("NodeLeft not checked against the store; the next store read decides", "member", ev.Node, "epoch", ev.Epoch, "err", err)
		return
	case found:
		if ev.Reason != wire.LeaveGoodbye || r.Epoch != ev.Epoch {
			n.log.Warn("ignored a NodeLeft for a node whose record is live (forged or replayed)", "member", ev.Node, "epoch", ev.Epoch,
				"reason", ev.Reason, "by", ev.By, "store_epoch", r.Epoch)
		}
		return
	}
	n.mu.Lock()
	epoch, member := n.members[ev.Node]
	n.mu.Unlock()
	if !member || epoch > ev.Epoch {
		return // not in this ring, or a later life is
	}
	calls := abandonCalls
	if ev.Reason == wire.LeaveGoodbye {
		calls = keepCalls // it drains and answers what it took
	}
	n.memberLeft(ev.Node, epoch, "broadcast: "+string(ev.Reason), calls)
	if ev.Reason != wire.LeaveGoodbye {
		n.kickSweep() // its record is gone: drain its queues now
	}
}

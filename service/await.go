package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/ring"
)

func (n *Node) ringState(q wire.RingQuery) wire.RingState {
	st := wire.RingState{Node: n.id, State: n.State().String(), Fingerprint: n.ring.Fingerprint().String(), Members: n.ring.Members()}
	if q.Resource != "" {
		st.Owner, _ = n.ring.Locate(q.Resource)
	}
	if b := n.Bus(); b != nil {
		// The services' messages: not the membership's own, such as the
		// ring queries of a dashboard watching this node.
		if h, i := b.Stats().Handled, n.internal.Load(); h > i {
			st.Handled = h - i
		}
	}
	return st
}

// ErrNotRunning is returned by the waits of a node that stopped or never
// ran; it wraps [Node.Err]'s reason, if any.
var ErrNotRunning = errors.New("service: node is not running")

// AwaitMembers waits until the node serves with at least count nodes in
// its ring, itself included. It returns nil then, ctx's error (wrapped)
// if ctx ends first, or an error matching [ErrNotRunning] if the node
// stops.
func (n *Node) AwaitMembers(ctx context.Context, count int) error {
	for {
		changed := n.watch()
		if n.State() == StateServing && len(n.ring.Members()) >= count {
			return nil
		}
		if err := n.waitChange(ctx, changed, 0); err != nil {
			return fmt.Errorf("service: node %s: waiting for %d members (the ring holds %d): %w", n.id, count, len(n.ring.Members()), err)
		}
	}
}

// AwaitConverged waits until every ring copy agrees, as far as this node
// can check: it serves, its ring holds exactly the live nodes of a read of
// the heartbeat store made after the call began, and every other member
// answers over the bus that it serves with a ring of the same fingerprint.
// It returns nil then, ctx's error (wrapped, saying what differs) if ctx
// ends first, or an error matching [ErrNotRunning] if the node stops.
func (n *Node) AwaitConverged(ctx context.Context) error {
	m0 := n.monitor.Load()
	var lists0 uint64
	if m0 != nil {
		_, lists0 = m0.View()
	}
	for {
		changed := n.watch()
		why := n.disagreement(ctx, m0, lists0)
		if why == "" {
			return nil
		}
		if err := n.waitChange(ctx, changed, n.cfg.Heartbeat.Interval); err != nil {
			return fmt.Errorf("service: node %s: waiting until every ring copy agrees (%s): %w", n.id, why, err)
		}
	}
}

func (n *Node) waitChange(ctx context.Context, changed <-chan struct{}, poll time.Duration) error {
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTimer(poll)
		defer t.Stop()
		tick = t.C
	}
	select {
	case <-changed:
	case <-tick:
	case <-n.done:
		if err := n.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrNotRunning, err)
		}
		return ErrNotRunning
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// disagreement returns what differs, or "".
func (n *Node) disagreement(ctx context.Context, m0 *heartbeat.Monitor, lists0 uint64) string {
	if st := n.State(); st != StateServing {
		return "this node is " + st.String()
	}
	m := n.monitor.Load()
	b := n.Bus()
	if m == nil || b == nil {
		return "this node is starting"
	}
	records, lists := m.View()
	if m == m0 && lists <= lists0 {
		return "waiting for a fresh read of the heartbeat store"
	}
	live := []string{n.id}
	for _, r := range records {
		if r.Node != n.id {
			live = append(live, r.Node)
		}
	}
	members := n.ring.Members()
	fp := n.ring.Fingerprint()
	if want := ring.FingerprintOf(live); want != fp {
		slices.Sort(live)
		return fmt.Sprintf("this node's ring holds %s, the heartbeat store's live nodes are %s", strings.Join(members, ","), strings.Join(live, ","))
	}
	cctx, cancel := context.WithTimeout(ctx, max(n.cfg.Heartbeat.EvictAfter, 100*time.Millisecond))
	defer cancel()
	var differ []string
	for _, v := range n.Rings(cctx, "") {
		switch {
		case v.Node == n.id:
		case v.Err != nil:
			differ = append(differ, fmt.Sprintf("node %s did not answer: %v", v.Node, message.AsError(v.Err).Code))
		case v.State != StateServing.String():
			differ = append(differ, fmt.Sprintf("node %s is %s", v.Node, v.State))
		case v.Fingerprint != fp.String():
			differ = append(differ, fmt.Sprintf("node %s's ring holds %s", v.Node, strings.Join(v.Members, ",")))
		}
	}
	if len(differ) == 0 {
		return ""
	}
	slices.Sort(differ)
	return fmt.Sprintf("%s; this node's ring holds %s", strings.Join(differ, "; "), strings.Join(members, ","))
}

package service

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/internal/wire"
)

// RingView is one node's answer to [Node.Rings]: its state and its copy
// of the ring.
type RingView struct {
	// Node is the node that answered (or was asked, if Err is set).
	Node string
	// State is its [State] name: "serving", "leaving", …
	State string
	// Fingerprint is its ring copy's, in hexadecimal (ring.Fingerprint's
	// String): nodes with equal fingerprints agree on every owner.
	Fingerprint string
	// Members are the nodes in its ring copy, sorted.
	Members []string
	// Owner is the owner of the resource asked about by its ring copy;
	// "" if none was asked or its ring is empty.
	Owner string
	// Handled counts the messages its services' handlers ran in its
	// current life (bus.Stats.Handled, without the membership's own,
	// such as these queries); it restarts at 0 when the node rejoins.
	Handled uint64
	// Err is why the node gave no answer: it did not answer by ctx's
	// deadline, or the bus refused the query.
	Err error
}

// Rings asks every member of this node's ring, itself included, for its
// ring copy over the bus (the cloudbus.v1.RingQuery of docs/wire.md), and
// if resource is not "", which node its ring says owns resource. It
// returns one view per member, sorted by node, once every member answered
// or ctx ended (a member that did not answer has Err set): bound it with
// a deadline. It answers for this node without the bus, and returns nil
// before the node serves.
func (n *Node) Rings(ctx context.Context, resource string) []RingView {
	b := n.Bus()
	if b == nil {
		return nil
	}
	members := n.ring.Members()
	views := make([]RingView, len(members))
	var wg sync.WaitGroup
	for i, p := range members {
		if p == n.id {
			views[i] = viewOf(n.ringState(wire.RingQuery{Resource: resource}))
			continue
		}
		wg.Go(func() {
			st, err := bus.Call[wire.RingState](ctx, b, bus.ServiceID(membershipService, p), wire.RingQuery{Resource: resource})
			if err != nil {
				views[i] = RingView{Node: p, Err: err}
				return
			}
			views[i] = viewOf(st)
		})
	}
	wg.Wait()
	slices.SortFunc(views, func(a, b RingView) int { return strings.Compare(a.Node, b.Node) })
	return views
}

// viewOf converts a wire answer.
func viewOf(st wire.RingState) RingView {
	return RingView{Node: st.Node, State: st.State, Fingerprint: st.Fingerprint, Members: st.Members, Owner: st.Owner, Handled: st.Handled}
}

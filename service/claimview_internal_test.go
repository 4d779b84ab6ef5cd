package service

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/message"
)

// TestClaimView: what a node says of its own failed claim, by its state;
// the lease-expired case runs end to end in TestStaleClaimSaysWhatTheNodeKnows.
func TestClaimView(t *testing.T) {
	const id = "7d2c9a4e1b3f4c5d8e6f7a8b9c0d1e2f"
	node := func(st State, epoch int64, stopped bool, runErr error) *Node {
		n := &Node{id: id, done: make(chan struct{}), epoch: epoch, runErr: runErr}
		n.state.Store(int32(st))
		if stopped {
			close(n.done)
		}
		return n
	}
	for _, tc := range []struct {
		name string
		n    *Node
		want string
	}{
		{"leaving", node(StateLeaving, 3, false, nil), "it is leaving in order"},
		{"left", node(StateStopped, 3, true, nil), "it left in order and has stopped"},
		{"stopping", node(StateStopped, 3, false, nil), "it is stopping"},
		{"evicted", node(StateEvicted, 3, false, nil), "it was evicted by its peers"},
		{"evicted and stopped", node(StateStopped, 3, true, ErrEvicted), "it was evicted by its peers and has stopped"},
		{"rejoining", node(StateStarting, 3, false, nil), "it was evicted by its peers and is joining again"},
		{"rejoined", node(StateServing, 5, false, nil), "it was evicted and has rejoined with epoch 5; the claim was of its life with epoch 3"},
		{"serving", node(StateServing, 3, false, nil), "it still serves in epoch 3 with its lease current"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Contains(t, tc.n.claimView(3), tc.want)
		})
	}
}

// TestExplainStale: only a StaleError of this node's claim gets the
// node's view, once, wherever it is wrapped, on a copy: the handler's
// error is left as it was; its matching is kept.
func TestExplainStale(t *testing.T) {
	const id, other = "7d2c9a4e1b3f4c5d8e6f7a8b9c0d1e2f", "3694776ab31a45709259254a018913ca"
	n := &Node{id: id, done: make(chan struct{}), epoch: 3}
	n.state.Store(int32(StateEvicted))
	claim := fence.Claim{Resource: "932763162d054c04adaab6ab498c9139", Node: id, Epoch: 3}

	se := &fence.StaleError{Claim: claim, Reason: "record gone"}
	got := n.explainStale(se)
	var out *fence.StaleError
	require.ErrorAs(t, got, &out)
	assert.Equal(t, "it was evicted by its peers", out.Claimant)
	assert.Empty(t, se.Claimant, "the handler's error is not changed")
	assert.Contains(t, got.Error(), "record gone; the claimant node says: it was evicted by its peers")

	// Wrapped, as a handler may return it: the text keeps the handler's
	// words, and the details that go on the wire carry the view.
	wrapped := fmt.Errorf("vm: start: %w", se)
	got = n.explainStale(wrapped)
	assert.Contains(t, got.Error(), "vm: start: fence: stale claim")
	assert.Contains(t, got.Error(), "; the claimant node says: it was evicted by its peers")
	assert.ErrorIs(t, got, fence.ErrStale)
	assert.ErrorIs(t, got, message.ErrNotOwner)
	assert.Contains(t, message.AsError(got).Details, "record gone; the claimant node says: it was evicted by its peers")
	assert.Empty(t, se.Claimant)

	n.state.Store(int32(StateLeaving))
	again := n.explainStale(got)
	assert.Same(t, got, again, "explained once")

	theirs := &fence.StaleError{Claim: fence.Claim{Resource: claim.Resource, Node: other, Epoch: 1}, Reason: "x"}
	assert.Same(t, theirs, n.explainStale(theirs), "another node's claim: this node knows nothing of it")
	plain := errors.New("plain")
	assert.Equal(t, plain, n.explainStale(plain), "no StaleError: nothing to do")
}

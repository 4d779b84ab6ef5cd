package fence_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/message"
)

func TestStaleReason(t *testing.T) {
	c := fence.Claim{Resource: vm1, Node: vm2, Epoch: 7}
	const maxAge = 3 * time.Second
	assert.Empty(t, fence.StaleReason(c, true, 7, time.Second, maxAge), "the claim holds")

	gone := fence.StaleReason(c, false, 0, 0, maxAge)
	assert.Contains(t, gone, "left in order", "a record deleted by a leave: not only an eviction")
	assert.Contains(t, gone, "evicted")
	assert.Contains(t, gone, "cannot tell")

	life := fence.StaleReason(c, true, 9, 0, maxAge)
	assert.Contains(t, life, "epoch 9, the claim's is 7")
	assert.Contains(t, life, "restarted")

	beat := fence.StaleReason(c, true, 7, 4*time.Second, maxAge)
	assert.Contains(t, beat, "last beat 4s ago")
	assert.Contains(t, beat, "MaxAge 3s")
	assert.NotContains(t, beat, "evicted it", "the record is still there: nobody evicted it yet")
}

func TestStaleErrorClaimant(t *testing.T) {
	c := fence.Claim{Resource: vm1, Node: vm2, Epoch: 7}
	cause := errors.New("db: connection reset")
	se := &fence.StaleError{Claim: c, Reason: fence.StaleReason(c, false, 0, 0, time.Second), Cause: cause}
	var err error = se
	assert.ErrorIs(t, err, fence.ErrStale)
	assert.ErrorIs(t, err, message.ErrNotOwner)
	assert.ErrorIs(t, err, cause)
	assert.NotContains(t, err.Error(), "claimant node says")

	se.Claimant = "it left in order"
	assert.Contains(t, err.Error(), se.Reason+"; the claimant node says: it left in order; nothing was written")
	wire := message.AsError(err)
	require.Equal(t, message.ErrNotOwner.Code, wire.Code)
	assert.Contains(t, wire.Details, "the claimant node says: it left in order", "the node's view reaches the caller")
	assert.Equal(t, message.RetrySafe, wire.Retry())
}

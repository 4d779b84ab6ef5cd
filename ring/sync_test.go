package ring_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/ring"
)

// recordingRing is a ring without Replace that records the calls Sync
// makes and fails those listed in fail.
type recordingRing struct {
	ring.Ring
	calls []string
	fail  map[string]error
}

func (r *recordingRing) Add(m string) error {
	r.calls = append(r.calls, "add "+m)
	if err := r.fail["add "+m]; err != nil {
		return err
	}
	return r.Ring.Add(m)
}

func (r *recordingRing) Remove(m string) error {
	r.calls = append(r.calls, "remove "+m)
	if err := r.fail["remove "+m]; err != nil {
		return err
	}
	return r.Ring.Remove(m)
}

func TestSyncAddsBeforeRemoving(t *testing.T) {
	r := &recordingRing{Ring: newTable(t)}
	require.NoError(t, ring.Sync(r, []string{"a", "b"}))
	r.calls = nil
	require.NoError(t, ring.Sync(r, []string{"c", "d"}))
	assert.Equal(t, []string{"add c", "add d", "remove a", "remove b"}, r.calls,
		"Sync must add before removing so a replaced membership never passes through empty")
}

func TestSyncJoinsFailures(t *testing.T) {
	errAdd, errRemove := errors.New("add failed"), errors.New("remove failed")
	r := &recordingRing{Ring: newTable(t), fail: map[string]error{"add x": errAdd, "remove b": errRemove}}
	require.NoError(t, ring.Sync(r, []string{"a", "b"}))
	err := ring.Sync(r, []string{"a", "x", "y", ""})
	require.ErrorIs(t, err, errAdd)
	require.ErrorIs(t, err, errRemove)
	require.ErrorIs(t, err, ring.ErrInvalidMember)
	assert.ErrorContains(t, err, `"x"`, "each failure names its member")
	assert.Equal(t, []string{"a", "b", "y"}, r.Members(), "Sync must apply every change that did not fail")
}

func TestSyncUsesReplacer(t *testing.T) {
	tab := newTable(t).(*ring.Table)
	members := []string{"c", "a", "b", "a"}
	kept := slices.Clone(members)
	require.NoError(t, ring.Sync(tab, members))
	assert.Equal(t, kept, members, "Sync must not modify its argument")
	assert.Equal(t, []string{"a", "b", "c"}, tab.Members())
	err := ring.Sync(tab, []string{"", "d"})
	require.ErrorIs(t, err, ring.ErrInvalidMember)
	assert.Equal(t, []string{"d"}, tab.Members())
}

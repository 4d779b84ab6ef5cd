package ring_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/ring/ringtest"
)

// TestLocateAllocs asserts the 0 allocs/op budget of Locate at 3, 10 and
// 100 members, for the default ring and the buraksezer option.
func TestLocateAllocs(t *testing.T) {
	keys := ringtest.UUIDs(7, 1024)
	for _, im := range impls[:2] {
		for _, n := range []int{3, 10, 100} {
			r := im.new(t)
			require.NoError(t, ring.Sync(r, ringtest.UUIDs(1, n)))
			i := 0
			allocs := testing.AllocsPerRun(1000, func() {
				if _, err := r.Locate(keys[i%len(keys)]); err != nil {
					t.Fatal(err)
				}
				i++
			})
			assert.Zero(t, allocs, "%s: Locate must not allocate at %d members", im.name, n)
		}
	}
}

// TestDefaultRingCopyBytes asserts the memory budget: one default ring of
// 100 members retains at most 1 MB.
func TestDefaultRingCopyBytes(t *testing.T) {
	defer ring.ComputeEveryChange()()
	const budget = 1 << 20
	members := ringtest.UUIDs(1, benchMembers)
	bytes := heapBytes(8, func() ring.Ring {
		r := newTable(t)
		require.NoError(t, ring.Sync(r, members))
		return r
	})
	t.Logf("default ring, %d members: %d bytes per copy", benchMembers, bytes)
	assert.LessOrEqual(t, bytes, uint64(budget), "a default ring of %d members must retain at most 1 MB", benchMembers)
	assert.Positive(t, bytes, "the measurement must see the ring")
}

// TestTablesShareSnapshots checks that tables of one process that reach
// the same members share the snapshot: the copies after the first
// retain next to nothing, and they answer alike.
func TestTablesShareSnapshots(t *testing.T) {
	members := ringtest.UUIDs(7, benchMembers)
	first := newTable(t)
	require.NoError(t, ring.Sync(first, members))
	require.NoError(t, ring.Sync(newTable(t), members[:benchMembers-1]))
	bytes := heapBytes(8, func() ring.Ring {
		r := newTable(t)
		// Another order of changes to the same members: a build, then a
		// join and a leave.
		require.NoError(t, ring.Sync(r, members[:benchMembers-1]))
		require.NoError(t, r.Add(members[benchMembers-1]))
		return r
	})
	t.Logf("default ring, %d members, shared: %d bytes per copy", benchMembers, bytes)
	assert.Less(t, bytes, uint64(16<<10), "a copy of a member set this process computed shares its snapshot")
	r := newTable(t)
	require.NoError(t, ring.Sync(r, members[:benchMembers-1]))
	require.NoError(t, r.Add(members[benchMembers-1]))
	for _, k := range ringtest.UUIDs(8, 1000) {
		want, err := first.Locate(k)
		require.NoError(t, err)
		got, err := r.Locate(k)
		require.NoError(t, err)
		require.Equal(t, want, got, "key %s", k)
	}
}

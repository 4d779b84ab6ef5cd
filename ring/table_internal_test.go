package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// names returns n deterministic member names.
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// referenceOwner is an independent, brute-force statement of the Table's
// placement rule: a key's partition is the top bits of its xxhash; the
// partition's owner is the member with the highest splitmix64-finalised
// score of memberHash XOR (partition+1)·golden, smaller name on ties.
func referenceOwner(members []string, partitions int, key string) string {
	shift := 64
	for p := partitions; p > 1; p >>= 1 {
		shift--
	}
	part := uint64(0)
	if shift < 64 {
		part = xxhash.Sum64String(key) >> shift
	}
	var owner string
	var top uint64
	for _, m := range members {
		z := xxhash.Sum64String(m) ^ (part+1)*0x9e3779b97f4a7c15
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		if owner == "" || z > top || (z == top && m < owner) {
			owner, top = m, z
		}
	}
	return owner
}

func TestTableMatchesReference(t *testing.T) {
	for _, partitions := range []int{1, 2, 64, 1 << 10} {
		tab, err := New(Config{Partitions: partitions})
		require.NoError(t, err)
		members := names("node", 7)
		for _, m := range members {
			require.NoError(t, tab.Add(m))
		}
		require.NoError(t, tab.Remove(members[2]))
		live := slices.Delete(slices.Clone(members), 2, 3)
		for i := range 2000 {
			key := fmt.Sprintf("key-%d", i)
			got, err := tab.Locate(key)
			require.NoError(t, err)
			require.Equal(t, referenceOwner(live, partitions, key), got, "partitions=%d key=%s", partitions, key)
		}
	}
}

// owners returns the owner name of every partition of t.
func partitionOwners(t *Table) []string {
	s := t.cur.Load()
	out := make([]string, len(s.owners))
	for p, o := range s.owners {
		out[p] = s.byIndex[o]
	}
	return out
}

// TestTableHistoryIndependence applies random Add/Remove/Replace sequences
// and checks that the partition table always equals one rebuilt from
// scratch, so the incremental and rebuild paths agree exactly.
func TestTableHistoryIndependence(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := names("m", 40)
	tab, err := New(Config{Partitions: 1 << 12})
	require.NoError(t, err)
	for step := range 200 {
		switch op := rng.IntN(3); op {
		case 0:
			_ = tab.Add(pool[rng.IntN(len(pool))])
		case 1:
			_ = tab.Remove(pool[rng.IntN(len(pool))])
		default:
			var want []string
			for _, m := range pool {
				if rng.IntN(4) == 0 {
					want = append(want, m)
				}
			}
			if rng.IntN(2) == 0 { // a small change: incremental path
				want = append(tab.Members(), pool[rng.IntN(len(pool))])
			}
			require.NoError(t, tab.Replace(want))
		}
		fresh, err := New(Config{Partitions: 1 << 12})
		require.NoError(t, err)
		require.NoError(t, fresh.Replace(tab.Members()))
		require.Equal(t, partitionOwners(fresh), partitionOwners(tab), "step %d: owners must depend only on membership", step)
		require.Equal(t, FingerprintOf(tab.Members()), tab.Fingerprint(), "step %d", step)
	}
}

func TestZeroTable(t *testing.T) {
	var tab Table
	_, err := tab.Locate("k")
	require.ErrorIs(t, err, ErrEmpty)
	assert.Empty(t, tab.Members())
	assert.Equal(t, FingerprintOf(nil), tab.Fingerprint())
	assert.Equal(t, DefaultPartitions, tab.Partitions())
	require.NoError(t, tab.Add("a"))
	got, err := tab.Locate("k")
	require.NoError(t, err)
	assert.Equal(t, "a", got)
	assert.Len(t, tab.cur.Load().owners, DefaultPartitions, "the zero Table uses DefaultConfig")
}

func TestTableReplaceTooMany(t *testing.T) {
	tab, err := New(Config{})
	require.NoError(t, err)
	require.NoError(t, tab.Add("keep"))
	err = tab.Replace(names("n", MaxMembers+1))
	require.ErrorIs(t, err, ErrTooManyMembers)
	assert.Equal(t, []string{"keep"}, tab.Members(), "a failed Replace must leave the ring unchanged")
}

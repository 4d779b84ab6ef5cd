package ring

import (
	"cmp"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
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

// referenceOwners is an independent, brute-force statement of the Table's
// placement rule: a member's score for partition p is the splitmix64
// finaliser of xxhash(member) XOR (p+1)·golden; every (partition, member)
// pair ranks by score (higher first), then member name (smaller first),
// then partition (smaller first); walking the pairs in that order, a
// partition goes to the pair's member if it has no owner yet and the
// member holds fewer than its capacity: the larger of ceil(P/n) and
// floor(P·1.015/n). This greedy walk gives the unique stable assignment
// that assign computes by deferred acceptance. It returns the owner of
// each partition.
func referenceOwners(members []string, partitions int) []string {
	type pair struct {
		score uint64
		m     string
		p     int
	}
	pairs := make([]pair, 0, partitions*len(members))
	for p := range partitions {
		for _, m := range members {
			z := xxhash.Sum64String(m) ^ uint64(p+1)*0x9e3779b97f4a7c15
			z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
			z = (z ^ (z >> 27)) * 0x94d049bb133111eb
			z ^= z >> 31
			pairs = append(pairs, pair{z, m, p})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		switch {
		case a.score != b.score:
			return cmp.Compare(b.score, a.score)
		case a.m != b.m:
			return strings.Compare(a.m, b.m)
		}
		return cmp.Compare(a.p, b.p)
	})
	n := len(members)
	capacity := max((partitions+n-1)/n, partitions*1015/(1000*n))
	owners := make([]string, partitions)
	held := map[string]int{}
	for _, pr := range pairs {
		if owners[pr.p] == "" && held[pr.m] < capacity {
			owners[pr.p] = pr.m
			held[pr.m]++
		}
	}
	return owners
}

// referencePartition returns key's partition out of partitions: the top
// bits of its xxhash.
func referencePartition(partitions int, key string) int {
	if partitions == 1 {
		return 0
	}
	return int(xxhash.Sum64String(key) >> (64 - bits.TrailingZeros(uint(partitions))))
}

func TestTableMatchesReference(t *testing.T) {
	for _, partitions := range []int{1, 2, 64, 1 << 10} {
		for _, n := range []int{1, 3, 7, 40} {
			tab, err := New(Config{Partitions: partitions})
			require.NoError(t, err)
			members := names("node", n+1)
			for _, m := range members {
				require.NoError(t, tab.Add(m))
			}
			require.NoError(t, tab.Remove(members[n/2]))
			live := slices.Delete(slices.Clone(members), n/2, n/2+1)
			want := referenceOwners(live, partitions)
			require.Equal(t, want, partitionOwners(tab), "partitions=%d members=%d", partitions, n)
			for i := range 2000 {
				key := fmt.Sprintf("key-%d", i)
				got, err := tab.Locate(key)
				require.NoError(t, err)
				require.Equal(t, want[referencePartition(partitions, key)], got, "partitions=%d members=%d key=%s", partitions, n, key)
			}
		}
	}
}

// TestTableExactShares checks the load bound on each member's exact share
// of the key space (its partitions / all of them) at the default 262144
// partitions: at most 1.03 of the mean share at 3, 10 and 100 members
// (the bound is 1.015), over three seeds of member names.
func TestTableExactShares(t *testing.T) {
	for _, n := range []int{3, 10, 100} {
		worst := 0.0
		for seed := range 3 {
			tab, err := New(Config{})
			require.NoError(t, err)
			require.NoError(t, tab.Replace(names(fmt.Sprintf("seed%d", seed), n)))
			counts := make([]int, n)
			for _, o := range tab.cur.Load().owners {
				counts[o]++
			}
			worst = max(worst, float64(slices.Max(counts))*float64(n)/float64(DefaultPartitions))
		}
		t.Logf("%3d members: busiest member's exact share %.4f of the mean", n, worst)
		assert.LessOrEqual(t, worst, 1.03, "exact max/mean share at %d members", n)
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

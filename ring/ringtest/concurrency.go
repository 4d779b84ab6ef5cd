package ringtest

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// concurrency runs readers against writers; run the suite with -race.
func (s *suite) concurrency(t *testing.T) {
	base := sortedUUIDs(memberSeed, 5)
	churn := UUIDs(extraSeed, 5)
	universe := slices.Sorted(slices.Values(append(slices.Clone(base), churn...)))
	ks := keys()[:256]
	r := s.build(t, base)

	const readers, rounds = 4, 4
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, readers)
	for g := range readers {
		wg.Go(func() {
			for i := g; !stop.Load(); i++ {
				o, err := r.Locate(ks[i%len(ks)])
				if err != nil {
					errs <- "Locate must succeed while members change (the ring is never empty here): " + err.Error()
					return
				}
				if _, found := slices.BinarySearch(universe, o); !found {
					errs <- "Locate must return a member while members change, got " + o
					return
				}
				if i%64 == 0 {
					if m := r.Members(); !slices.IsSorted(m) || len(m) < len(base) {
						errs <- "Members must stay sorted and hold the stable members while members change"
						return
					}
					_ = r.Fingerprint()
				}
			}
		})
	}
	for range rounds {
		for _, m := range churn {
			assert.NoError(t, r.Add(m), "Add during concurrent reads")
		}
		for _, m := range churn {
			assert.NoError(t, r.Remove(m), "Remove during concurrent reads")
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		assert.Fail(t, e)
	}
	require.Equal(t, base, r.Members(), "after concurrent churn the ring must hold exactly the stable members")
}

// allocation checks that Locate does not allocate.
func (s *suite) allocation(t *testing.T) {
	ks := keys()
	for _, n := range []int{1, 3, 10} {
		r := s.build(t, UUIDs(memberSeed, n))
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			_, _ = r.Locate(ks[i%len(ks)])
			i++
		})
		assert.Zero(t, allocs, "Locate must not allocate (%d members)", n)
	}
	empty := s.newRing(t)
	allocs := testing.AllocsPerRun(100, func() { _, _ = empty.Locate(ks[0]) })
	assert.Zero(t, allocs, "Locate on an empty ring must not allocate")
}

package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
)

// testConcurrent runs beaters, listers and evictors at once and checks
// that the outcome is one the rules allow: each record is evicted at most
// once; a node learns of its eviction from Beat and never beats again;
// a surviving record's sequence counts exactly the successful beats; an
// evicted record stays gone; one lister never sees a sequence go back;
// a node nobody tries to evict keeps every beat.
func testConcurrent(e *env) {
	const nodes, beats, listers, evictors = 8, 40, 2, 3
	ns := make([]string, nodes)
	epochs := make(map[string]int64, nodes)
	for i := range ns {
		ns[i] = node()
		epochs[ns[i]] = e.register(ns[i])
	}

	var (
		wg      sync.WaitGroup
		stop    atomic.Bool
		failMu  sync.Mutex
		fails   []string
		okBeats = make([]atomic.Int64, nodes)
		outed   = make([]atomic.Bool, nodes) // Beat returned ErrEvicted
		wins    = make([]atomic.Int64, nodes)
	)
	fail := func(format string, args ...any) {
		failMu.Lock()
		fails = append(fails, fmt.Sprintf(format, args...))
		failMu.Unlock()
	}
	ctx := e.ctx()

	var beaters sync.WaitGroup
	for i, n := range ns {
		beaters.Go(func() {
			for range beats {
				err := e.s.Beat(ctx, n, epochs[n])
				switch {
				case err == nil:
					okBeats[i].Add(1)
				case errors.Is(err, heartbeat.ErrEvicted):
					outed[i].Store(true)
					// The record must stay gone: Beat never revives it.
					if err := e.s.Beat(ctx, n, epochs[n]); !errors.Is(err, heartbeat.ErrEvicted) {
						fail("a Beat after ErrEvicted must return ErrEvicted again, got %v", err)
					}
					return
				default:
					fail("concurrent Beat must succeed or return ErrEvicted, got %v", err)
					return
				}
			}
		})
	}
	for range listers {
		wg.Go(func() {
			last := make(map[string]int64)
			for !stop.Load() {
				recs, err := e.s.List(ctx)
				if err != nil {
					fail("concurrent List must succeed, got %v", err)
					return
				}
				seen := make(map[string]bool)
				for _, r := range recs {
					if _, mine := epochs[r.Node]; !mine {
						continue
					}
					if seen[r.Node] {
						fail("List returned two records for %s", r.Node)
					}
					seen[r.Node] = true
					if r.Seq < last[r.Node] {
						fail("the sequence of %s went back from %d to %d", r.Node, last[r.Node], r.Seq)
					}
					last[r.Node] = r.Seq
				}
			}
		})
	}
	for g := range evictors {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for !stop.Load() {
				recs, err := e.s.List(ctx)
				if err != nil {
					fail("concurrent List must succeed, got %v", err)
					return
				}
				for _, r := range recs {
					i := indexOf(ns, r.Node)
					// Evict a few of the odd nodes' records, chosen at
					// random, as listed; the even nodes survive, so their
					// sequences can be checked.
					if i < 0 || i%2 == 0 || rng.IntN(4*nodes) != 0 {
						continue
					}
					ok, err := e.s.Evict(ctx, r.Node, r.Epoch, r.Seq)
					if err != nil {
						fail("concurrent Evict must succeed, got %v", err)
						return
					}
					if ok {
						wins[i].Add(1)
					}
				}
			}
		})
	}
	beaters.Wait()
	stop.Store(true)
	wg.Wait()
	require.Empty(e.t, fails, "concurrent use broke the store's rules")

	final := e.list(ns...)
	for i, n := range ns {
		w := wins[i].Load()
		require.LessOrEqual(e.t, w, int64(1), "a record must be evicted at most once (node %s)", n)
		r, present := final[n]
		if w == 1 {
			assert.False(e.t, present, "a record whose Evict reported true must be gone (node %s)", n)
			continue
		}
		assert.False(e.t, outed[i].Load(), "Beat returned ErrEvicted for %s, but no Evict reported true", n)
		if assert.True(e.t, present, "a record never evicted must be listed (node %s)", n) {
			assert.Equal(e.t, okBeats[i].Load(), r.Seq, "the sequence must count the successful beats (node %s)", n)
		}
		if i%2 == 0 {
			assert.Equal(e.t, int64(beats), okBeats[i].Load(), "every Beat of a node nobody evicts must succeed (node %s)", n)
		}
	}
}

func indexOf(ns []string, n string) int {
	for i, x := range ns {
		if x == n {
			return i
		}
	}
	return -1
}

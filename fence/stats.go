package fence

import (
	"errors"
	"sync/atomic"
)

// Stats counts what a fence's Do did, since the fence was made; the
// fences (fence/sqlfence, fence/memfence) return it from their Stats
// method for metrics (package service/metrics).
type Stats struct {
	// Runs counts the transactions whose function ran and committed.
	Runs uint64
	// Repeats counts the messages handled before whose recorded reply was
	// returned without running the function: redeliveries and retries.
	Repeats uint64
	// Stale counts the refusals of a claim that did not hold (a
	// [*StaleError] returned): writes refused because their node lost
	// the resource.
	Stale uint64
}

// Counters are the atomic counters behind [Stats], for a fence
// implementation to embed. The zero value is ready; its methods are safe
// for concurrent use.
type Counters struct {
	runs, repeats, stale atomic.Uint64
}

// Count records the outcome of one Do: err is its error, ran whether the
// function ran. An outcome that is neither a commit, a repeat nor a stale
// claim (another failure) is not counted.
func (c *Counters) Count(ran bool, err error) {
	switch {
	case err == nil && ran:
		c.runs.Add(1)
	case err == nil:
		c.repeats.Add(1)
	case errors.Is(err, ErrStale):
		c.stale.Add(1)
	}
}

// Stats returns the counts so far.
func (c *Counters) Stats() Stats {
	return Stats{Runs: c.runs.Load(), Repeats: c.repeats.Load(), Stale: c.stale.Load()}
}

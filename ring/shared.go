package ring

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Tables in one process share the snapshots they compute. A snapshot's
// owners depend only on its members and partition count, so when many
// nodes run in one process (a test suite's cluster, the embedded demo,
// refnode scale), each membership change is computed once, not once per
// node: at 100 members a change costs about 7 ms of CPU, and 100 nodes
// each computing each of 100 joins would spend a minute of CPU on what
// one computation gives. The cache holds the last sharedSize member sets
// (about 0.5 MiB each at the default partition count), and a computation
// under way is waited for rather than repeated.
const sharedSize = 8

// shared is the process's snapshot cache.
var shared = snapshotCache{}

// snapshotCache maps member sets to the snapshots computed for them,
// most recent last.
type snapshotCache struct {
	off     atomic.Bool // set by the benchmarks that time the computation
	mu      sync.Mutex
	entries []*sharedEntry
}

// sharedEntry is one member set's snapshot, computed once. (A sync.Once
// and not a channel: a channel made in one testing/synctest bubble must
// not be waited on from another.)
type sharedEntry struct {
	shift uint
	fp    Fingerprint
	names []string // sorted
	once  sync.Once
	snap  *snapshot // nil if the computation panicked
}

// get returns the snapshot of the sorted members names at shift, computed
// by compute if no Table of this process has it or is computing it.
func (c *snapshotCache) get(shift uint, names []string, compute func() *snapshot) *snapshot {
	if c.off.Load() {
		return compute()
	}
	fp := fingerprintSorted(names)
	c.mu.Lock()
	for i, e := range c.entries {
		if e.shift == shift && e.fp == fp && slices.Equal(e.names, names) {
			// Most recent last: a hit stays.
			c.entries = append(append(c.entries[:i:i], c.entries[i+1:]...), e)
			c.mu.Unlock()
			e.once.Do(func() { e.snap = compute() })
			if e.snap != nil {
				return e.snap
			}
			return compute()
		}
	}
	e := &sharedEntry{shift: shift, fp: fp, names: slices.Clone(names)}
	if len(c.entries) >= sharedSize {
		c.entries = slices.Delete(c.entries, 0, 1)
	}
	c.entries = append(c.entries, e)
	c.mu.Unlock()
	e.once.Do(func() { e.snap = compute() })
	if e.snap != nil {
		return e.snap
	}
	return compute()
}

package fence

import (
	"fmt"
	"sync"
)

// Journal holds, per resource, a side effect's outcome whose write failed,
// with the version that write read. The zero value is empty and ready; a
// Journal is safe for concurrent use.
type Journal[T any] struct {
	mu      sync.Mutex
	entries map[string]Entry[T] // by resource
	seq     uint64              // Record calls so far, for Entry.seq
	stats   JournalStats        // Pending is filled in by Stats
}

// Entry is what a [Journal] holds for one resource.
type Entry[T any] struct {
	// Base is the record version the failed write read.
	Base int64
	// Outcome is what the side effect did.
	Outcome T

	seq uint64 // which Record made it: Applied removes only this one
}

// Verdict is what [Journal.Check] made of an entry.
type Verdict int

// The verdicts.
const (
	// EntryNone: no entry.
	EntryNone Verdict = iota
	// EntryCurrent: the base is current: the repair may apply it.
	EntryCurrent
	// EntryStale: the base is not current: it was dropped.
	EntryStale
)

// String returns "none", "current", "stale", or "Verdict(n)".
func (v Verdict) String() string {
	switch v {
	case EntryNone:
		return "none"
	case EntryCurrent:
		return "current"
	case EntryStale:
		return "stale"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// JournalStats are a [Journal]'s counters.
type JournalStats struct {
	// Recorded counts [Journal.Record] calls.
	Recorded uint64
	// Applied counts entries [Journal.Applied] removed.
	Applied uint64
	// Stale counts entries dropped as stale.
	Stale uint64
	// Pending counts the entries held now.
	Pending int
}

// Record sets resource's entry to base and outcome.
func (j *Journal[T]) Record(resource string, base int64, outcome T) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.entries == nil {
		j.entries = make(map[string]Entry[T])
	}
	j.seq++
	j.entries[resource] = Entry[T]{Base: base, Outcome: outcome, seq: j.seq}
	j.stats.Recorded++
}

// Forget drops resource's entry, if any.
func (j *Journal[T]) Forget(resource string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.entries, resource)
}

// Check judges resource's entry against current, the version the repair
// read, and removes it if stale.
func (j *Journal[T]) Check(resource string, current int64) (Entry[T], Verdict) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.entries[resource]
	switch {
	case !ok:
		return Entry[T]{}, EntryNone
	case e.Base == current:
		return e, EntryCurrent
	}
	delete(j.entries, resource)
	j.stats.Stale++
	return e, EntryStale
}

// Overtaken drops, as stale, and returns resource's entry if version is
// above its base.
func (j *Journal[T]) Overtaken(resource string, version int64) (Entry[T], bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.entries[resource]
	if !ok || version <= e.Base {
		return Entry[T]{}, false
	}
	delete(j.entries, resource)
	j.stats.Stale++
	return e, true
}

// Applied removes e, from [Journal.Check], once its repair committed;
// false means e was replaced or forgotten.
func (j *Journal[T]) Applied(resource string, e Entry[T]) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	cur, ok := j.entries[resource]
	if !ok || cur.seq != e.seq {
		return false
	}
	delete(j.entries, resource)
	j.stats.Applied++
	return true
}

// Stats returns the journal's counters.
func (j *Journal[T]) Stats() JournalStats {
	j.mu.Lock()
	defer j.mu.Unlock()
	st := j.stats
	st.Pending = len(j.entries)
	return st
}

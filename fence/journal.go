package fence

import (
	"fmt"
	"sync"
)

// Journal remembers side effects outside the database whose record did
// not follow: a call to another system (a hypervisor) that succeeded
// before the fenced write recording its outcome failed. Each [Entry]
// holds the outcome and the version of the resource's record that the
// failed write had read, its base. A repair applies an entry only while
// the record is still at that version, so it never undoes a write
// acknowledged after the side effect; see "Side effects outside the
// database" in the package documentation for the rules.
//
//	// The handler's transaction read the record at version vm.Version,
//	// the hypervisor started the VM, the final write failed:
//	j.Record(vm.UUID, vm.Version, "running")
//
//	// Later, in the repair's fenced transaction, with the record read
//	// there:
//	e, v := j.Check(vm.UUID, vm.Version)
//	if v == fence.EntryCurrent { /* write e.Outcome if the record is still at vm.Version */ }
//	// and once that transaction committed:
//	j.Applied(vm.UUID, e)
//
// A Journal lives in memory, one per node and kind of resource: the
// failure that makes a node journal is usually the database itself, and a
// crash loses the entries (the record then stays behind the side effect;
// it never overwrites a newer write).
//
// The zero value is an empty journal ready to use. A Journal is safe for
// concurrent use; its methods never block beyond a short lock and keep
// no argument but the outcome. It must not be copied after first use.
type Journal[T any] struct {
	mu      sync.Mutex
	entries map[string]Entry[T] // by resource
	seq     uint64              // Record calls so far, for Entry.seq
	stats   JournalStats        // Pending is filled in by Stats
}

// Entry is what a [Journal] holds for one resource: a side effect whose
// record did not follow.
type Entry[T any] struct {
	// Base is the version of the resource's record that the failed write
	// read before the side effect: the record the side effect followed.
	Base int64
	// Outcome is what the side effect did, for the repair to record (for
	// refnode's VM service, the state the hypervisor put the VM in).
	Outcome T

	seq uint64 // which Record made it: Applied removes only this one
}

// Verdict is what [Journal.Check] made of a resource's entry.
type Verdict int

// The verdicts.
const (
	// EntryNone: the journal holds nothing for the resource.
	EntryNone Verdict = iota
	// EntryCurrent: the entry's base is the record's current version:
	// nothing was written since the side effect's failed write, so the
	// repair may record the entry's outcome (and must then call
	// [Journal.Applied]).
	EntryCurrent
	// EntryStale: the record changed since the entry was taken (its
	// version is not the entry's base): a later write was acknowledged,
	// and the record says what its caller was told. The entry was dropped
	// and counted in JournalStats.Stale; the repair must not apply it.
	EntryStale
)

// String returns "none", "current", "stale", or "Verdict(n)" for a value
// this package does not define.
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

// JournalStats counts what a [Journal] did since it was made. Each entry
// recorded is applied, stale, pending, or was forgotten or replaced by a
// later Record, so Recorded is at least Applied + Stale + Pending.
type JournalStats struct {
	// Recorded counts the entries recorded ([Journal.Record]).
	Recorded uint64
	// Applied counts the entries whose repair committed and removed them
	// ([Journal.Applied] reporting true).
	Applied uint64
	// Stale counts the entries dropped because their record changed
	// since they were taken ([Journal.Check]'s EntryStale, and
	// [Journal.Overtaken]).
	Stale uint64
	// Pending is the number of entries held now.
	Pending int
}

// Record journals that a side effect on resource had outcome while the
// write recording it failed; base is the version of the resource's record
// that the failed write read before the side effect. It replaces an
// earlier entry for the resource: the latest side effect this node saw
// is the one the record should follow.
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

// Forget drops resource's entry without applying it: a write of this node
// recorded the resource since (its record is newer than the entry), or
// the truth is known otherwise (the other system reported the resource's
// state). It does nothing if there is no entry.
func (j *Journal[T]) Forget(resource string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.entries, resource)
}

// Check judges resource's entry against current, the version of the
// resource's record that the repair read in its fenced transaction. It
// returns the entry and:
//
//   - EntryCurrent if the entry's base is current: the repair may record
//     the entry's outcome, compare-and-setting on current in its write,
//     and calls [Journal.Applied] once that write committed. The entry
//     stays until then, so a repair that fails leaves it for the next.
//   - EntryStale otherwise: the entry is removed and counted stale; the
//     returned entry says what it was (its Base, for the log). A version
//     only grows, so the entry could never apply again.
//   - EntryNone, and the zero Entry, if there is none.
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

// Overtaken drops resource's entry, counted stale as by [Journal.Check],
// if version is above the entry's base, and returns the dropped entry
// and true. version is the record's version as read outside the
// repair's transaction, by a listing say, which may lag the record but
// never leads it: above the base, a write committed after the one that
// failed, so the entry can never apply; at or below it, the entry is
// kept (the read may predate the failed write). A node sweeping records
// it does not own calls it to drop the entries those records overtook.
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

// Applied records that the repair of resource from e (as [Journal.Check]
// returned it) committed: e is removed and counted applied, and Applied
// reports true. An entry recorded for the resource after that Check is a
// newer side effect: it is kept, and Applied reports false, as it does
// if e was forgotten meanwhile.
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

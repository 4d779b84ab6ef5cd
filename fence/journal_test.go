package fence_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/fence"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const vm1, vm2 = "932763162d054c04adaab6ab498c9139", "3694776ab31a45709259254a018913ca"

// TestJournal runs each rule of the journal as a sequence of steps on a
// new journal: what Check says, and the counters at the end.
func TestJournal(t *testing.T) {
	type step func(t *testing.T, j *fence.Journal[string])
	record := func(res string, base int64, out string) step {
		return func(_ *testing.T, j *fence.Journal[string]) { j.Record(res, base, out) }
	}
	forget := func(res string) step {
		return func(_ *testing.T, j *fence.Journal[string]) { j.Forget(res) }
	}
	check := func(res string, current int64, want fence.Verdict, base int64, out string) step {
		return func(t *testing.T, j *fence.Journal[string]) {
			e, v := j.Check(res, current)
			assert.Equal(t, want, v, "Check(%s, %d)", res[:4], current)
			assert.Equal(t, base, e.Base, "Check(%s, %d): the entry's base", res[:4], current)
			assert.Equal(t, out, e.Outcome, "Check(%s, %d): the entry's outcome", res[:4], current)
		}
	}
	// checkThenApply checks (want current) and applies after the steps
	// in between ran: a repair whose transaction spans them.
	checkThenApply := func(res string, current int64, between ...step) step {
		return func(t *testing.T, j *fence.Journal[string]) {
			e, v := j.Check(res, current)
			require.Equal(t, fence.EntryCurrent, v)
			for _, s := range between {
				s(t, j)
			}
			j.Applied(res, e)
		}
	}
	overtaken := func(res string, version int64, want bool, base int64) step {
		return func(t *testing.T, j *fence.Journal[string]) {
			e, ok := j.Overtaken(res, version)
			assert.Equal(t, want, ok, "Overtaken(%s, %d)", res[:4], version)
			assert.Equal(t, base, e.Base, "Overtaken(%s, %d): the dropped entry's base", res[:4], version)
		}
	}
	applyTwice := func(res string, base int64) step {
		return func(t *testing.T, j *fence.Journal[string]) {
			e, v := j.Check(res, base)
			require.Equal(t, fence.EntryCurrent, v)
			assert.True(t, j.Applied(res, e), "the first Applied removes the entry")
			assert.False(t, j.Applied(res, e), "the second finds nothing to remove")
		}
	}
	for _, c := range []struct {
		name  string
		steps []step
		want  fence.JournalStats
	}{
		{"nothing journaled", []step{check(vm1, 1, fence.EntryNone, 0, "")}, fence.JournalStats{}},
		{"the record did not change: the entry applies, and stays until applied", []step{
			record(vm1, 4, "running"),
			check(vm1, 4, fence.EntryCurrent, 4, "running"),
			check(vm1, 4, fence.EntryCurrent, 4, "running"),
			checkThenApply(vm1, 4),
			check(vm1, 4, fence.EntryNone, 0, ""),
		}, fence.JournalStats{Recorded: 1, Applied: 1}},
		{"an acknowledged write since: the entry is dropped, counted stale", []step{
			record(vm1, 1, "running"),
			check(vm1, 3, fence.EntryStale, 1, "running"),
			check(vm1, 1, fence.EntryNone, 0, ""),
		}, fence.JournalStats{Recorded: 1, Stale: 1}},
		{"a version below the base is no match either", []step{
			record(vm1, 5, "running"),
			check(vm1, 4, fence.EntryStale, 5, "running"),
		}, fence.JournalStats{Recorded: 1, Stale: 1}},
		{"a later record replaces the entry", []step{
			record(vm1, 2, "running"),
			record(vm1, 2, "stopped"),
			check(vm1, 2, fence.EntryCurrent, 2, "stopped"),
		}, fence.JournalStats{Recorded: 2, Pending: 1}},
		{"forget: a write of this node recorded the resource", []step{
			record(vm1, 2, "running"),
			forget(vm1),
			forget(vm1),
			check(vm1, 2, fence.EntryNone, 0, ""),
		}, fence.JournalStats{Recorded: 1}},
		{"resources are apart", []step{
			record(vm1, 2, "running"),
			record(vm2, 7, "stopped"),
			check(vm2, 8, fence.EntryStale, 7, "stopped"),
			check(vm1, 2, fence.EntryCurrent, 2, "running"),
		}, fence.JournalStats{Recorded: 2, Stale: 1, Pending: 1}},
		{"applied keeps an entry recorded during the repair", []step{
			record(vm1, 2, "running"),
			checkThenApply(vm1, 2, record(vm1, 3, "stopped")),
			check(vm1, 3, fence.EntryCurrent, 3, "stopped"),
		}, fence.JournalStats{Recorded: 2, Pending: 1}},
		{"applied after a forget removes nothing more", []step{
			record(vm1, 2, "running"),
			checkThenApply(vm1, 2, forget(vm1)),
			check(vm1, 2, fence.EntryNone, 0, ""),
		}, fence.JournalStats{Recorded: 1}},
		{"overtaken: a lagging read at or below the base keeps the entry, above it drops it", []step{
			record(vm1, 3, "running"),
			overtaken(vm1, 2, false, 0),
			overtaken(vm1, 3, false, 0),
			check(vm1, 3, fence.EntryCurrent, 3, "running"),
			overtaken(vm1, 4, true, 3),
			overtaken(vm1, 5, false, 0),
			check(vm1, 5, fence.EntryNone, 0, ""),
		}, fence.JournalStats{Recorded: 1, Stale: 1}},
		{"overtaken without an entry", []step{overtaken(vm2, 9, false, 0)}, fence.JournalStats{}},
		{"applied twice counts once", []step{
			record(vm1, 2, "running"),
			applyTwice(vm1, 2),
		}, fence.JournalStats{Recorded: 1, Applied: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var j fence.Journal[string] // the zero value is ready
			for _, s := range c.steps {
				s(t, &j)
			}
			assert.Equal(t, c.want, j.Stats())
		})
	}
}

func TestVerdictString(t *testing.T) {
	for v, want := range map[fence.Verdict]string{
		fence.EntryNone: "none", fence.EntryCurrent: "current", fence.EntryStale: "stale", fence.Verdict(9): "Verdict(9)",
	} {
		assert.Equal(t, want, v.String())
	}
}

// TestJournalConcurrent records, checks, applies and forgets on a few
// resources from many goroutines (run it with -race): the counters add
// up, every entry is accounted for once, and no entry applies to a
// version other than its base.
func TestJournalConcurrent(t *testing.T) {
	var j fence.Journal[int64]
	const workers, rounds = 8, 500
	resources := []string{vm1, vm2, "11111111111111111111111111111111"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var applied, forgotten uint64
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				res := resources[(w+i)%len(resources)]
				version := int64(i % 4)
				switch (w * i) % 5 {
				case 0, 1:
					j.Record(res, version, version) // the outcome names its base
				case 4:
					if e, ok := j.Overtaken(res, version); ok && e.Base >= version {
						t.Errorf("Overtaken(%d) dropped an entry of base %d", version, e.Base)
					}
				case 2:
					e, v := j.Check(res, version)
					if v == fence.EntryCurrent {
						if e.Outcome != version || e.Base != version {
							t.Errorf("Check(%d) gave an entry of base %d", version, e.Base)
						}
						if j.Applied(res, e) {
							mu.Lock()
							applied++
							mu.Unlock()
						}
					}
				case 3:
					j.Forget(res)
					mu.Lock()
					forgotten++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	st := j.Stats()
	assert.Equal(t, applied, st.Applied, "every Applied that removed its entry is counted")
	assert.LessOrEqual(t, st.Applied+st.Stale+uint64(st.Pending), st.Recorded, "no entry is counted twice")
	assert.LessOrEqual(t, st.Pending, len(resources), "one entry per resource at most")
	t.Logf("%+v, %d forgets", st, forgotten)
}

// A start ran on the hypervisor but the write recording it failed (the
// database link dropped): the node journals it with the version the
// failed write had read. The repair records it while nobody wrote the VM
// since; an entry overtaken by an acknowledged write is dropped.
func ExampleJournal() {
	var j fence.Journal[string]

	// VM 1: the StartVm's transaction read version 7; the start ran; the
	// final write failed.
	j.Record("vm-1", 7, "running")
	// The sweep's fenced transaction reads VM 1: still version 7.
	e, v := j.Check("vm-1", 7)
	fmt.Println("vm-1:", v, e.Outcome)
	// ... it writes "running" if the record is still at version 7, and
	// once that committed:
	j.Applied("vm-1", e)

	// VM 2: the same, but meanwhile another owner started and stopped the
	// VM, acknowledged both, and the record is at version 5.
	j.Record("vm-2", 3, "running")
	e, v = j.Check("vm-2", 5)
	fmt.Println("vm-2:", v, "base", e.Base)

	fmt.Printf("%+v\n", j.Stats())
	// Output:
	// vm-1: current running
	// vm-2: stale base 3
	// {Recorded:2 Applied:1 Stale:1 Pending:0}
}

package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// commit is one commit a service reported.
type commit struct {
	id   string
	node string    // the node that committed it; "" if unknown
	at   time.Time // zero: unknown
}

// Commit records that the message id committed its effect on node at
// at: the write it made became durable (a read: the value it returned
// was taken). Call it once per commit, where the service commits (inside
// a fence's commit function, after a SQL transaction's Commit returned:
// rec.Commit(r.ID(), r.Node(), time.Now()) with the handler's
// *bus.Request r), or after the run from an end-state read of the store,
// with node "" and at zero when the store does not say (the volume
// example keeps one event row per applied write, with its message id).
// The operations sent with bus.WithID([Recorder.ID]) are matched by
// their id. It is safe for concurrent use.
func (r *Recorder) Commit(id, node string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commits = append(r.commits, commit{id: id, node: node, at: at})
}

// Audit is what the commits recorded with [Recorder.Commit] say beside
// the histories [Check] checks: Jepsen-style counts of anomalies, each
// 0 in a correct run. A history check finds most of them too once a
// read shows them; the audit counts them, each kind apart, even when
// no read did.
type Audit struct {
	// Commits is the number of commits recorded.
	Commits int
	// Timed is the number of those recorded with their time under an
	// operation's id: Late and Stale count among them only.
	Timed int
	// Lost counts acknowledged operations that wrote (the wrote
	// function given to [Recorder.Audit] says which) but committed
	// nothing: the reply said done, the store has no trace of it.
	Lost int
	// Twice counts operations that committed more than once: a message
	// delivered again ran again.
	Twice int
	// Refused counts operations that committed although their call
	// failed with an error saying nothing ran.
	Refused int
	// Phantom counts commits under a message id no operation was sent
	// with: a retry under a new id (not idempotent), or a write from
	// nowhere.
	Phantom int
	// Late counts commits more than the grace after their caller's
	// deadline: a handler that went on after its caller gave up.
	Late int
	// Stale counts commits that landed after the commit of a later
	// operation on the same resource: one invoked after this
	// operation had ended (its reply, or for an unknown outcome its
	// deadline). A write of the past overwrote a newer one.
	Stale int
	// Overdue counts the calls that ended more than the grace after
	// their deadline ([Recorder.Overdue]).
	Overdue int
	// First describes the first anomalies found (up to 5).
	First []string
}

// OK reports whether every count is 0.
func (a Audit) OK() bool {
	return a.Lost == 0 && a.Twice == 0 && a.Refused == 0 && a.Phantom == 0 && a.Late == 0 && a.Stale == 0 && a.Overdue == 0
}

// String lists the counts in a line, then the first anomalies.
func (a Audit) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d commits: %d acknowledged writes lost, %d committed twice, %d committed though refused, "+
		"%d under no operation's id; of %d timed, %d late, %d stale; %d calls overdue",
		a.Commits, a.Lost, a.Twice, a.Refused, a.Phantom, a.Timed, a.Late, a.Stale, a.Overdue)
	for _, f := range a.First {
		fmt.Fprintf(&b, "\n  %s", f)
	}
	return b.String()
}

// Audit counts the anomalies of [Audit] from the operations and the
// commits recorded. wrote says which acknowledged operations must have
// committed, from their input and output (nil: every one, reads
// included: for a service that records a commit for each operation it
// runs). grace is how late past a deadline a commit or a call's end is
// still on time: 0 inside a testing/synctest bubble, some milliseconds
// in real time. Commits with no time (an end-state read) count in
// Lost, Twice, Refused and Phantom only. Call it once the clients
// ended.
func (r *Recorder) Audit(grace time.Duration, wrote func(in, out any) bool) Audit {
	overdue := r.Overdue(grace)
	r.mu.Lock()
	defer r.mu.Unlock()
	a := Audit{Commits: len(r.commits), Overdue: overdue}
	note := func(format string, args ...any) {
		if len(a.First) < 5 {
			a.First = append(a.First, fmt.Sprintf(format, args...))
		}
	}
	describe := func(op Op) string {
		rec := r.ops[op]
		return fmt.Sprintf("client %d, %s on %s (id %s, %s)", rec.client, fmt.Sprint(rec.in), rec.key, rec.id, rec.outcome)
	}

	n := make([]int, len(r.ops))          // commits per operation
	nodes := make([][]string, len(r.ops)) // the nodes that committed each
	type timed struct {
		op   Op
		node string
		at   time.Time
	}
	by := func(node string) string {
		if node == "" {
			return ""
		}
		return " by node " + node
	}
	perKey := map[string][]timed{}
	for _, c := range r.commits {
		op, ok := r.byID[c.id]
		if !ok {
			a.Phantom++
			note("a commit%s under message id %s, which no operation was sent with", by(c.node), c.id)
			continue
		}
		n[op]++
		if c.node != "" {
			nodes[op] = append(nodes[op], c.node)
		}
		rec := r.ops[op]
		if c.at.IsZero() {
			continue
		}
		a.Timed++
		perKey[rec.key] = append(perKey[rec.key], timed{op, c.node, c.at})
		if !rec.deadline.IsZero() && c.at.Sub(rec.deadline) > grace {
			a.Late++
			note("committed%s %s after its caller's deadline: %s", by(c.node), c.at.Sub(rec.deadline), describe(op))
		}
	}
	for i, rec := range r.ops {
		op := Op(i)
		switch {
		case n[i] > 1:
			a.Twice++
			note("committed %d times%s: %s", n[i], by(strings.Join(nodes[i], ", ")), describe(op))
		case n[i] > 0 && rec.outcome == Failed:
			a.Refused++
			note("committed%s though its call failed saying nothing ran: %s", by(strings.Join(nodes[i], ", ")), describe(op))
		case n[i] == 0 && rec.outcome == OK && (wrote == nil || wrote(rec.in, rec.out)):
			a.Lost++
			note("acknowledged, never committed: %s", describe(op))
		}
	}
	// Stale: walking a resource's commits in time order, one whose
	// operation had ended before an operation committed earlier was
	// invoked.
	for _, key := range slices.Sorted(maps.Keys(perKey)) {
		cs := perKey[key]
		slices.SortStableFunc(cs, func(x, y timed) int { return x.at.Compare(y.at) })
		var newest Op = -1 // of the commits so far, the one invoked last
		for _, c := range cs {
			rec := r.ops[c.op]
			end := rec.ended
			if rec.outcome == Unknown && !rec.deadline.IsZero() {
				end = rec.deadline // it may take effect up to its deadline
			}
			if newest >= 0 && rec.outcome != Pending && !end.IsZero() && r.ops[newest].call.at.After(end) {
				a.Stale++
				note("committed%s at %s over %s, invoked %s after it ended: %s", by(c.node), c.at.Format("15:04:05.000"),
					describe(newest), r.ops[newest].call.at.Sub(end), describe(c.op))
			}
			if newest < 0 || rec.call.at.After(r.ops[newest].call.at) {
				newest = c.op
			}
		}
	}
	return a
}

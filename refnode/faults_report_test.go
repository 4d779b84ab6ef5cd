package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
)

// lateRun is an execution that started after its caller's deadline plus
// the bound.
type lateRun struct {
	call callRecord
	exec execution
}

// faultRow is what one window of the fault test measured.
type faultRow struct {
	w        faultWindow
	calls    int
	outcomes map[string]int
	// The two promises.
	lateRuns []lateRun     // runs on an owner after the caller's deadline + fdBound
	untimely []callRecord  // calls without a reply or typed error by deadline + fdBound
	ops      map[string]op // op id -> its call and executions, for evidence
	// For the reader.
	refusedLate     int           // messages of the window's calls refused as late (owner or portal)
	ranAfterTimeout []string      // op ids of calls told timeout whose operation ran on an owner all the same
	twice           []string      // op ids of calls whose operation ran more than once
	okWithoutRun    int           // successful calls with no run in any op log: the collector missed it
	failedAfter     int           // calls invoked after the fault's end that failed
	slowest         time.Duration // the longest call
	longestGap      time.Duration // the longest a VM went between two successful calls (ending in the window)
	// The deadline owners saw, less the caller's: the lowest and the
	// highest, and whether any was seen.
	dlLow, dlHigh time.Duration
	dlSeen        bool
}

// seeDeadline notes the deadline an owner saw for a call.
func (r *faultRow) seeDeadline(off time.Duration) {
	if !r.dlSeen {
		r.dlLow, r.dlHigh, r.dlSeen = off, off, true
		return
	}
	r.dlLow, r.dlHigh = min(r.dlLow, off), max(r.dlHigh, off)
}

// deadlineText is "-12ms…+0s", or "-".
func (r faultRow) deadlineText() string {
	if !r.dlSeen {
		return "-"
	}
	return signed(r.dlLow.Round(time.Millisecond)) + "…" + signed(r.dlHigh.Round(time.Millisecond))
}

// op is a call with what the nodes did with it.
type op struct {
	call   callRecord
	owner  []execution
	portal []execution
}

// analyzeFaults assigns every call to the window it was invoked in (the
// first window reaching back to the start, the last to the end) and
// checks it against the op logs.
func analyzeFaults(windows []faultWindow, calls []callRecord, c *collected) []faultRow {
	rows := make([]faultRow, len(windows))
	for i, w := range windows {
		rows[i] = faultRow{w: w, outcomes: map[string]int{}, ops: map[string]op{}}
	}
	window := func(at time.Time) int {
		i := 0
		for i < len(windows)-1 && !at.Before(windows[i].to) {
			i++
		}
		return i
	}
	lastOK := map[string]time.Time{} // VM -> its latest success so far, by completion
	for _, call := range slices.SortedFunc(slices.Values(calls), func(a, b callRecord) int { return a.Done.Compare(b.Done) }) {
		if call.Outcome != "ok" {
			continue
		}
		if prev, ok := lastOK[call.VM]; ok {
			r := &rows[window(call.Done)]
			r.longestGap = max(r.longestGap, call.Done.Sub(prev))
		}
		lastOK[call.VM] = call.Done
	}
	for _, call := range calls {
		r := &rows[window(call.Invoke)]
		o := op{call: call, owner: c.Owner[call.OpID], portal: c.Portal[call.OpID]}
		r.ops[call.OpID] = o
		r.calls++
		r.outcomes[call.Outcome]++
		r.slowest = max(r.slowest, call.Took())
		if call.Outcome != "ok" && call.Invoke.After(r.w.end) {
			r.failedAfter++
		}
		deadline := call.Deadline(fdTimeout)
		runs, did := 0, 0
		for _, e := range o.owner {
			if !e.Deadline.IsZero() {
				r.seeDeadline(e.Deadline.Sub(deadline))
			}
			if !e.Ran() {
				if e.Err == string(message.ErrTimeout.Code) {
					r.refusedLate++
				}
				continue
			}
			runs++
			if e.Did() {
				did++
			}
			if e.Start.After(deadline.Add(fdBound)) {
				r.lateRuns = append(r.lateRuns, lateRun{call: call, exec: e})
			}
		}
		for _, e := range o.portal {
			if !e.Ran() && e.Err == string(message.ErrTimeout.Code) {
				r.refusedLate++
			}
		}
		if did > 1 {
			r.twice = append(r.twice, call.OpID)
		}
		if runs == 0 && call.Outcome == "ok" {
			r.okWithoutRun++
		}
		if did > 0 && call.Outcome == string(message.ErrTimeout.Code) {
			r.ranAfterTimeout = append(r.ranAfterTimeout, call.OpID)
		}
		if call.Outcome == "unknown" || call.Took() > fdTimeout+fdBound {
			r.untimely = append(r.untimely, call)
		}
	}
	return rows
}

// faultReport formats the rows as markdown: what ran, one table row per
// window, then every broken promise with its calls and executions.
func faultReport(rows []faultRow, c *collected, skipped int, took time.Duration) string {
	def := heartbeat.DefaultConfig()
	var b strings.Builder
	fmt.Fprintf(&b, "### Delivery under faults\n\n")
	fmt.Fprintf(&b, "3 `refnode serve` processes on RabbitMQ + PostgreSQL, default heartbeat (beat %s, lease %s, evict %s), "+
		"each node reaching the broker and the database through its own TCP proxy. Load: %d VMs called through api.portal by one "+
		"client at %d calls/s, one call per VM at a time, %s deadline (GetVm; StartVm/StopVm on every 5th VM).\n\n",
		def.Interval, def.Lease, def.EvictAfter, fdVMs, fdRate, fdTimeout)
	fmt.Fprintf(&b, "*late runs*: operations that started on their owner more than %s after their caller's deadline; "+
		"*no timely outcome*: calls without a reply or a typed error %s after their deadline; *recovery*: from the fault's end until "+
		"every VM had a successful call (each VM is called about every %s while all is well, which is the floor); *failed after*: "+
		"calls invoked after the fault's end that failed; *longest gap*: the longest a VM went between two successful calls; "+
		"*refused late*: messages a node did not run because their deadline had passed; *timed out, ran*: calls told `timeout` "+
		"whose operation ran on its owner all the same (before the deadline); *ran twice*: operations run more than once on an "+
		"owner (refusals by a fenced or non-owner node not counted); *owner's deadline*: the deadline the owners saw, less the "+
		"caller's, lowest…highest.\n\n",
		fdBound, fdBound, (time.Duration(fdVMs) * time.Second / fdRate).Round(100*time.Millisecond))
	fmt.Fprintf(&b, "| window | calls | outcomes | late runs | no timely outcome | recovery | failed after | longest gap | refused late | timed out, ran | ran twice | slowest call | owner's deadline |\n")
	fmt.Fprintf(&b, "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		name := r.w.name
		if r.w.restart {
			name = "*" + name + "*"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %d | %s | %d | %s | %d | %d | %d | %s | %s |\n", name, r.calls, outcomes(r.outcomes),
			len(r.lateRuns), len(r.untimely), recoveryText(r.w), r.failedAfter, r.longestGap.Round(time.Millisecond),
			r.refusedLate, len(r.ranAfterTimeout), len(r.twice), r.slowest.Round(time.Millisecond), r.deadlineText())
	}
	fmt.Fprintf(&b, "\nOp logs: %d lines", c.Lines)
	if c.Partial > 0 {
		fmt.Fprintf(&b, " (%d cut short)", c.Partial)
	}
	fmt.Fprintf(&b, "; ticks with every VM busy: %d. Whole test: %s.\n", skipped, took.Round(time.Second))
	for _, r := range rows {
		if len(r.lateRuns) == 0 && len(r.untimely) == 0 && len(r.twice) == 0 && len(r.ranAfterTimeout) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n#### %s\n\n", r.w.name)
		fmt.Fprintf(&b, "Fault from %s to %s.\n", r.w.start.Format(clockFormat), r.w.end.Format(clockFormat))
		if len(r.lateRuns) > 0 {
			fmt.Fprintf(&b, "\n%d late runs, by lateness after the deadline: %s (listed in the test's failure)\n", len(r.lateRuns), lateSpread(r.lateRuns))
		}
		if len(r.untimely) > 0 {
			fmt.Fprintf(&b, "\n%d calls without a timely outcome, by outcome: %s (listed in the test's failure)\n", len(r.untimely), untimelyOutcomes(r.untimely))
		}
		r.examples(&b, "ran twice", r.twice)
		r.examples(&b, "timed out, ran", r.ranAfterTimeout)
	}
	return b.String()
}

// examplesMax bounds the examples the report gives of each observation.
const examplesMax = 3

// examples writes up to examplesMax of the calls ids as code blocks.
func (r faultRow) examples(b *strings.Builder, what string, ids []string) {
	if len(ids) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s: %d calls, e.g.\n\n```\n", what, len(ids))
	for _, id := range ids[:min(len(ids), examplesMax)] {
		b.WriteString(r.ops[id].describe())
	}
	b.WriteString("```\n")
}

// outcomes is "ok 412, timeout 13, not_owner 2", ok first, then by count.
func outcomes(m map[string]int) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		switch {
		case a == "ok":
			return -1
		case b == "ok":
			return 1
		case m[a] != m[b]:
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// lateSpread is "min 0.2s, median 1.4s, max 6.1s".
func lateSpread(runs []lateRun) string {
	var ds []time.Duration
	for _, l := range runs {
		ds = append(ds, l.exec.Start.Sub(l.call.Deadline(fdTimeout)))
	}
	lo, med, hi := spread(ds)
	return fmt.Sprintf("min %s, median %s, max %s", lo.Round(time.Millisecond), med.Round(time.Millisecond), hi.Round(time.Millisecond))
}

// untimelyOutcomes counts the untimely calls by outcome.
func untimelyOutcomes(calls []callRecord) string {
	m := map[string]int{}
	for _, c := range calls {
		m[c.Outcome]++
	}
	return outcomes(m)
}

// evidenceMax bounds the calls an evidence listing details.
const evidenceMax = 12

// lateEvidence details the late runs of r: each call, what it was told
// and when, every line the op logs hold about it, and the node's log
// around the late start.
func (r faultRow) lateEvidence(fc *faultCluster) string {
	var b strings.Builder
	for i, l := range r.lateRuns {
		if i == evidenceMax {
			fmt.Fprintf(&b, "… and %d more late runs\n", len(r.lateRuns)-i)
			break
		}
		fmt.Fprintf(&b, "late run %d: started %s after the deadline\n", i+1, l.exec.Start.Sub(l.call.Deadline(fdTimeout)).Round(time.Millisecond))
		b.WriteString(r.ops[l.call.OpID].describe())
		for _, line := range fc.logAround(l.exec.Label, l.exec.Start, 3*time.Second, 500*time.Millisecond, 12) {
			fmt.Fprintf(&b, "    log %s: %s\n", l.exec.Label, line)
		}
	}
	return b.String()
}

// untimelyEvidence details the calls of r without a timely outcome.
func (r faultRow) untimelyEvidence() string {
	var b strings.Builder
	for i, c := range r.untimely {
		if i == evidenceMax {
			fmt.Fprintf(&b, "… and %d more calls\n", len(r.untimely)-i)
			break
		}
		b.WriteString(r.ops[c.OpID].describe())
	}
	return b.String()
}

// describe is the call, what it was told, and each op log line about it.
func (o op) describe() string {
	c := o.call
	var b strings.Builder
	fmt.Fprintf(&b, "  call %s %s vm %s: invoked %s, deadline %s, ended %s after %s: %s", c.OpID, c.Kind, c.VM[:8],
		c.Invoke.Format(clockFormat), c.Deadline(fdTimeout).Format(clockFormat), c.Done.Format(clockFormat),
		c.Took().Round(time.Millisecond), c.Outcome)
	if c.Err != "" {
		fmt.Fprintf(&b, " (%s)", tail(c.Err, 200))
	}
	b.WriteString("\n")
	for _, e := range o.portal {
		fmt.Fprintf(&b, "    portal: %s\n", e)
	}
	for _, e := range o.owner {
		fmt.Fprintf(&b, "    owner:  %s\n", e)
	}
	if len(o.portal)+len(o.owner) == 0 {
		b.WriteString("    no op log line names it\n")
	}
	return b.String()
}

// logAround returns up to n lines of the stderr of the process labelled
// label whose slog time lies within [at-before, at+after].
func (fc *faultCluster) logAround(label string, at time.Time, before, after time.Duration, n int) []string {
	var c *child
	for _, node := range fc.nodes {
		for _, r := range node.runs {
			if r.label == label {
				c = r
			}
		}
	}
	if c == nil {
		return nil
	}
	var out []string
	for _, l := range c.logLines() {
		if !l.At.Before(at.Add(-before)) && !l.At.After(at.Add(after)) {
			out = append(out, tail(l.Text, 400))
		}
	}
	if len(out) > n { // the last lines: those leading up to the time, and just after
		out = out[len(out)-n:]
	}
	return out
}

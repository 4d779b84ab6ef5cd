package main

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/refnode/internal/chaoscheck"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
)

// The chaos test's linearizability check: each image's calls, recorded
// by several processes on the machine's wall clock, are replayed in time
// order into a chaoscheck.Recorder (its clock set to each event's time),
// and the history is checked with porcupine against
// chaoscheck.Register; each VM's calls (and the repairs of its record,
// from the nodes' logs: vmHistory) likewise against chaoscheck.VM.
//
// A long history is cut into segments at isolated reads: a successful
// read whose interval overlaps no other operation's (a call of unknown
// outcome counts up to its deadline + fdBound). Every operation before
// it returned before it started and every one after started after it
// returned, so in any linearization it sits between them and the
// register (or the VM) holds what it read: the history is linearizable
// if and only if each segment is, from the state the previous cut read.
// Segments keep porcupine's work (its cache holds a bitset of the
// history per state) small however long the test runs.

// inputOf is the register operation of a call.
func inputOf(o chaosOp) chaoscheck.Input {
	switch o.Kind {
	case chaosWrite:
		return chaoscheck.Input{Kind: chaoscheck.Write, Value: o.Value}
	case chaosCAS:
		return chaoscheck.Input{Kind: chaoscheck.CAS, Value: o.Value, Expect: o.Expect}
	}
	return chaoscheck.Input{Kind: chaoscheck.Read}
}

// failed reports whether the call is known not to have taken effect.
func failed(o chaosOp) bool { return o.Class == classSafe || o.Class == classNever }

// imageHistory replays one image's calls into a recorder and returns
// the history, each operation's Metadata its call. A call that failed
// before it ran is left out; one of unknown outcome (a silent one too)
// may take effect until its deadline + fdBound.
func imageHistory(ops []chaosOp) []porcupine.Operation {
	calls := make([]histCall, len(ops))
	for i, o := range ops {
		c := histCall{client: o.Client, invoke: o.Invoke, done: o.Done, in: inputOf(o), meta: o}
		switch {
		case o.Class == classOK:
			c.out = chaoscheck.Output{Value: o.Got, Swapped: o.Swapped}
		case failed(o):
			c.fail = true
		default:
			c.until = o.deadline().Add(fdBound)
		}
		calls[i] = c
	}
	return replayHistory(calls)
}

// histCall is one operation of a history to replay: a register's
// (chaoscheck.Input, Output) or a VM's (VMInput, VMOutput).
type histCall struct {
	client       int
	invoke, done int64 // Unix nanoseconds
	in, out      any   // out: what it returned, if it did
	fail         bool  // it did not take effect: left out
	until        time.Time
	meta         any // the call, for reports
}

// replayHistory replays calls, in time order, into a chaoscheck.Recorder
// whose clock is set to each event's time, and returns the history, each
// operation's Metadata its call's meta. A call that returned gives its
// out; one that failed is left out; any other may take effect until its
// until.
func replayHistory(calls []histCall) []porcupine.Operation {
	type event struct {
		at  int64
		end bool
		i   int
	}
	events := make([]event, 0, 2*len(calls))
	for i, c := range calls {
		events = append(events, event{c.invoke, false, i}, event{max(c.done, c.invoke), true, i})
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		if a.end != b.end { // at one instant, invocations first: concurrent, the lenient reading
			if a.end {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.i, b.i)
	})
	var now time.Time
	rec := chaoscheck.NewRecorder(func() time.Time { return now })
	ids := make([]chaoscheck.Op, len(calls))
	var invoked []int // call indices in invocation order
	for _, e := range events {
		now = time.Unix(0, e.at)
		c := calls[e.i]
		if !e.end {
			switch in := c.in.(type) {
			case chaoscheck.VMInput:
				ids[e.i] = rec.InvokeVM(c.client, in)
			default:
				ids[e.i] = rec.Invoke(c.client, in.(chaoscheck.Input))
			}
			invoked = append(invoked, e.i)
			continue
		}
		switch out := c.out.(type) {
		case chaoscheck.Output:
			rec.Return(ids[e.i], out)
		case chaoscheck.VMOutput:
			rec.ReturnVM(ids[e.i], out)
		default:
			if c.fail {
				rec.Fail(ids[e.i])
			} else {
				rec.Unknown(ids[e.i], c.until)
			}
		}
	}
	hist := rec.Operations() // in invocation order, without the failed
	j := 0
	for _, i := range invoked {
		if calls[i].out == nil && calls[i].fail {
			continue
		}
		hist[j].Metadata = calls[i].meta
		j++
	}
	return hist
}

// readValue returns what a successful read returned (a register's name,
// a VM's state); false for another operation.
func readValue(op porcupine.Operation) (any, bool) {
	switch in := op.Input.(type) {
	case chaoscheck.Input:
		out := op.Output.(chaoscheck.Output)
		return out.Value, in.Kind == chaoscheck.Read && !out.Unknown
	case chaoscheck.VMInput:
		out := op.Output.(chaoscheck.VMOutput)
		return out.State, in.Op == "" && !out.Unknown
	}
	return nil, false
}

// segment is a part of a history, from a known state.
type segment struct {
	init any
	ops  []porcupine.Operation
}

// splitHistory cuts hist into segments of at least size operations
// (the last may be shorter) at isolated reads; init is the first state.
func splitHistory(hist []porcupine.Operation, init any, size int) []segment {
	ops := slices.Clone(hist)
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var segs []segment
	start, maxRet := 0, int64(-1)
	for i, op := range ops {
		v, read := readValue(op)
		isolated := read && maxRet < op.Call && (i+1 == len(ops) || ops[i+1].Call > op.Return)
		maxRet = max(maxRet, op.Return)
		if isolated && i+1-start >= size && i+1 < len(ops) {
			segs = append(segs, segment{init: init, ops: ops[start : i+1]})
			init, start = v, i+1
		}
	}
	return append(segs, segment{init: init, ops: ops[start:]})
}

// historyCheck is porcupine's verdict on one resource's history.
type historyCheck struct {
	index, ops, segments int
	result               porcupine.CheckResult
	took                 time.Duration
	evidence             string // for a history that is not Ok
}

// registerModel is the model of an image's name, from init (a string).
func registerModel(init any) porcupine.Model { return chaoscheck.Register(init.(string)) }

// vmModel is the model of a VM, from init (a cloud.VMState).
func vmModel(init any) porcupine.Model { return chaoscheck.VM(init.(cloud.VMState)) }

// checkHistory checks the history of resource index (what: "image",
// "vm") segment by segment, each against model from its first state and
// within limit; for an illegal segment it describes the first violating
// operations and writes porcupine's visualization into dir ("" for
// none).
func checkHistory(what string, index int, hist []porcupine.Operation, init any, model func(init any) porcupine.Model, size int, limit time.Duration, dir string) historyCheck {
	began := time.Now()
	segs := splitHistory(hist, init, size)
	c := historyCheck{index: index, ops: len(hist), segments: len(segs), result: porcupine.Ok}
	for s, seg := range segs {
		m := model(seg.init)
		res := porcupine.CheckOperationsTimeout(m, seg.ops, limit)
		if res == porcupine.Ok {
			continue
		}
		c.result = res
		if res == porcupine.Illegal {
			_, info := porcupine.CheckOperationsVerbose(m, seg.ops, limit)
			c.evidence = fmt.Sprintf("segment %d of %d (from %v, %d operations): %s", s+1, len(segs), seg.init, len(seg.ops), firstViolations(seg, info))
			if dir != "" {
				path := filepath.Join(dir, fmt.Sprintf("chaos-%s-%d-segment-%d.html", what, index, s+1))
				if err := porcupine.VisualizePath(m, info, path); err == nil {
					c.evidence += "\nvisualization: " + path
				}
			}
		} else {
			c.evidence = fmt.Sprintf("segment %d of %d (%d operations): porcupine gave up after %s", s+1, len(segs), len(seg.ops), limit)
		}
		break
	}
	c.took = time.Since(began)
	return c
}

// firstViolations describes the longest linearizable prefix porcupine
// found and the first operations (by invocation) it could not place,
// with the operations concurrent with the first.
func firstViolations(seg segment, info porcupine.LinearizationInfo) string {
	var longest []int
	for _, part := range info.PartialLinearizations() {
		for _, l := range part {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	placed := map[int]bool{}
	for _, id := range longest {
		placed[id] = true
	}
	var out []porcupine.Operation
	for id, op := range seg.ops {
		if !placed[id] {
			out = append(out, op)
		}
	}
	slices.SortStableFunc(out, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	s := fmt.Sprintf("the longest linearizable prefix holds %d of %d operations", len(longest), len(seg.ops))
	if len(longest) > 0 {
		s += fmt.Sprintf("; its last: %s", describeOp(seg.ops[longest[len(longest)-1]]))
	}
	if len(out) == 0 {
		return s
	}
	first := out[0]
	s += "\nfirst not placed: " + describeOp(first)
	n := 0
	for _, op := range seg.ops {
		if op.Call <= first.Return && op.Return >= first.Call && op.Call != first.Call && n < 8 {
			s += "\n  concurrent: " + describeOp(op)
			n++
		}
	}
	return s
}

// describeOp is the call behind a history operation, or the operation.
func describeOp(op porcupine.Operation) string {
	if o, ok := op.Metadata.(fmt.Stringer); ok {
		return o.String()
	}
	return fmt.Sprintf("%+v -> %+v", op.Input, op.Output)
}

// TestChaosHistory checks the replay, the cut and the check on made-up
// calls of three clients: a linearizable history passes in one segment
// or cut in several; a stale read fails with the read named; an unknown
// write may take effect until its deadline + fdBound, not later.
func TestChaosHistory(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) int64 { return t0.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	seq := 0
	call := func(client int, kind, value, expect string, from, to int, class, got string, swapped bool) chaosOp {
		seq++
		return chaosOp{Client: client, Seq: seq, Kind: kind, Value: value, Expect: expect, Invoke: at(from), Done: at(to),
			Deadline: at(from + 5000), Outcome: class, Class: class, Got: got, Swapped: swapped, OpID: fmt.Sprint("op-", seq)}
	}
	ok := []chaosOp{
		call(0, chaosWrite, "a", "", 0, 10, classOK, "a", true),
		call(1, chaosRead, "", "", 5, 15, classOK, "init", false), // concurrent with the write: may read either
		call(2, chaosRead, "", "", 20, 25, classOK, "a", false),   // isolated
		call(0, chaosCAS, "b", "a", 30, 40, classOK, "b", true),
		call(1, chaosWrite, "c", "", 35, 45, classSafe, "", false), // refused: left out
		call(2, chaosRead, "", "", 50, 55, classOK, "b", false),    // isolated
		call(1, chaosWrite, "d", "", 60, 70, classUnknown, "", false),
		call(0, chaosRead, "", "", 80, 90, classOK, "b", false), // d not yet
		call(2, chaosRead, "", "", 100, 110, classOK, "d", false),
		call(0, chaosCAS, "e", "b", 120, 130, classOK, "d", false), // not swapped: the name is d
	}
	hist := imageHistory(ok)
	assert.Len(t, hist, len(ok)-1, "the refused call is left out")
	assert.Equal(t, ok[0], hist[0].Metadata, "each operation carries its call")
	c := checkHistory("image", 0, hist, chaosInitName, registerModel, 1000, time.Minute, "")
	assert.Equal(t, porcupine.Ok, c.result, c.evidence)
	assert.Equal(t, 1, c.segments)
	segs := splitHistory(hist, chaosInitName, 2)
	require.Len(t, segs, 3, "cut at the two isolated reads")
	assert.Equal(t, "a", segs[1].init)
	assert.Equal(t, "b", segs[2].init)
	c = checkHistory("image", 0, hist, chaosInitName, registerModel, 2, time.Minute, "")
	assert.Equal(t, porcupine.Ok, c.result, c.evidence)
	assert.Equal(t, 3, c.segments)

	stale := append(slices.Clone(ok), call(1, chaosRead, "", "", 200, 210, classOK, "b", false))
	c = checkHistory("image", 0, imageHistory(stale), chaosInitName, registerModel, 2, time.Minute, "")
	assert.Equal(t, porcupine.Illegal, c.result, "a read of b after d was read")
	assert.Contains(t, c.evidence, `read() -> "b"`)

	late := slices.Clone(ok[:7])
	late = append(late, call(0, chaosRead, "", "", 5300, 5310, classOK, "b", false), // past d's deadline + fdBound: d never ran
		call(2, chaosRead, "", "", 5400, 5410, classOK, "d", false)) // yet here it is
	c = checkHistory("image", 0, imageHistory(late), chaosInitName, registerModel, 1000, time.Minute, "")
	assert.Equal(t, porcupine.Illegal, c.result, "an unknown write that takes effect after its deadline + fdBound")
	within := slices.Clone(ok[:7])
	within = append(within, call(0, chaosRead, "", "", 5000, 5010, classOK, "b", false),
		call(2, chaosRead, "", "", 5400, 5410, classOK, "d", false))
	c = checkHistory("image", 0, imageHistory(within), chaosInitName, registerModel, 1000, time.Minute, "")
	assert.Equal(t, porcupine.Ok, c.result, "it may take effect until its deadline + fdBound: %s", c.evidence)
}

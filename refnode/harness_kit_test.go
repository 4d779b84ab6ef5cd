package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
)

// Tests of the fault harness's own parts, without processes: the load
// driver and the op log collector on an in-process cluster, and the
// fault test's analysis on made-up records.

// TestDriverAndCollector drives an in-process cluster whose nodes write
// op logs, and checks the driver's records against them: every op id is
// unique, every call succeeded, one call per VM at a time, and each call
// ran once, on the node its reply names, with the op id the driver sent
// (the portal forwards the x-op header to the owner).
func TestDriverAndCollector(t *testing.T) {
	dir := t.TempDir()
	logs := map[string]*opLog{}
	var paths []string
	c, err := startCluster(t.Context(), clusterConfig{nodes: 3, prefix: "driver-test", heartbeat: heartbeat.TestConfig(),
		hypervisor: simhv.Config{}, pingInterval: time.Second,
		observer: func(node string) bus.Observer {
			path := filepath.Join(dir, node+".ops.jsonl")
			l, err := openOpLog(path, node, opLogFlush, "")
			require.NoError(t, err)
			logs[node], paths = l, append(paths, path)
			return l
		}})
	require.NoError(t, err)
	defer c.close()
	cl, err := c.client(t.Context(), "driver-test")
	require.NoError(t, err)
	defer cl.Close()
	vms := createVMs(t, t.Context(), cl, 20)

	start := time.Now()
	d := startDriver(cl, vms, driverOptions{Rate: 200, Timeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = d.awaitAnswered(ctx, start, 10*time.Second)
	require.NoError(t, err, "every VM answers")
	sleepUntil(ctx, start.Add(time.Second))
	d.stop()
	d.stop() // idempotent
	calls := d.Calls()
	require.NoError(t, c.close())
	for _, l := range logs {
		require.NoError(t, l.Close())
	}

	assert.InDelta(t, 200, len(calls), 80, "about 200 calls in a second at 200/s")
	labels := map[string]string{}
	for _, m := range c.all() {
		labels[m.node.UUID()] = m.label
	}
	ops, err := collectOps(paths, labels)
	require.NoError(t, err)
	assert.Zero(t, ops.Partial)
	seen := map[string]bool{}
	kinds := map[string]int{}
	for _, call := range calls {
		require.False(t, seen[call.OpID], "op id %s is unique", call.OpID)
		seen[call.OpID] = true
		kinds[call.Kind]++
		require.Equal(t, "ok", call.Outcome, "call %s: %s", call.OpID, call.Err)
		assert.False(t, call.Done.Before(call.Invoke))
		runs := ops.Owner[call.OpID]
		require.Len(t, runs, 1, "call %s ran once on an owner", call.OpID)
		e := runs[0]
		assert.Equal(t, "handle", e.Op)
		assert.Equal(t, call.Node, e.Node, "the op log names the node the reply names")
		assert.Equal(t, labels[call.Node], e.Label)
		assert.Equal(t, "refnode.v1."+call.Kind, e.Type)
		assert.False(t, e.Start.Before(call.Invoke), "the run started after the invocation")
		assert.False(t, e.Start.After(call.Done), "the run started before the reply arrived")
		assert.WithinDuration(t, call.Deadline(2*time.Second), e.Deadline, 100*time.Millisecond, "the owner saw the call's deadline")
		require.Len(t, ops.Portal[call.OpID], 1, "call %s went through one portal", call.OpID)
		assert.Equal(t, bus.APIPortal, ops.Portal[call.OpID][0].ServiceID)
	}
	assert.Positive(t, kinds["GetVm"])
	assert.Positive(t, kinds["StartVm"], "every 5th VM is started and stopped")
	// One call per VM at a time: no two calls about a VM overlap.
	byVM := map[string][]callRecord{}
	for _, call := range calls {
		byVM[call.VM] = append(byVM[call.VM], call)
	}
	for vm, cs := range byVM {
		for i := range cs {
			for j := range i {
				a, b := cs[i], cs[j]
				assert.False(t, a.Invoke.Before(b.Done) && b.Invoke.Before(a.Done), "calls %s and %s about VM %s overlap", a.OpID, b.OpID, vm)
			}
		}
	}
}

// TestCollectOps: a last line cut short is skipped and counted, other
// lines must parse, api.portal lines are kept apart, lines without an op
// id are ignored.
func TestCollectOps(t *testing.T) {
	dir := t.TempDir()
	line := func(e opEntry) string {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		return string(b) + "\n"
	}
	at := "2025-03-01T12:00:00.5Z"
	a := filepath.Join(dir, "a.jsonl")
	require.NoError(t, os.WriteFile(a, []byte(
		line(opEntry{At: at, Op: "start", Node: "n1"})+
			line(opEntry{At: at, Op: "handle", Node: "n1", ServiceID: bus.APIPortal, OpID: "op-1"})+
			line(opEntry{At: at, Op: "handle", Node: "n1", ServiceID: "vmInstance.n1", OpID: "op-1", Deadline: "2025-03-01T12:00:05Z"})+
			`{"at":"2025-03-01T12:00:01Z","op":"han`), 0o644))
	b := filepath.Join(dir, "b.jsonl")
	require.NoError(t, os.WriteFile(b, []byte(
		line(opEntry{At: at, Op: "reject", Node: "n2", ServiceID: "vmInstance.n2", OpID: "op-1", Err: "timeout"})+
			line(opEntry{At: at, Op: "handle", Node: "n2", ServiceID: "vmInstance.n2", OpID: "op-2", Err: "not_owner"})), 0o644))

	c, err := collectOps([]string{a, b}, map[string]string{"n1": "A1"})
	require.NoError(t, err)
	assert.Equal(t, 1, c.Partial, "a.jsonl's last line was cut short")
	assert.Equal(t, 5, c.Lines)
	require.Len(t, c.Portal["op-1"], 1)
	require.Len(t, c.Owner["op-1"], 2)
	first := c.Owner["op-1"][0]
	assert.Equal(t, "A1", first.Label)
	assert.Equal(t, time.Date(2025, 3, 1, 12, 0, 0, 5e8, time.UTC), first.Start.UTC())
	assert.Equal(t, time.Date(2025, 3, 1, 12, 0, 5, 0, time.UTC), first.Deadline.UTC())
	assert.True(t, first.Ran() && first.Did())
	second := c.Owner["op-1"][1]
	assert.Equal(t, "n2", second.Label, "a node without a label keeps its UUID")
	assert.False(t, second.Ran(), "a reject is no run")
	assert.Contains(t, second.String(), "b.jsonl:1")
	notOwner := c.Owner["op-2"][0]
	assert.True(t, notOwner.Ran(), "the guard's refusal ran a handler")
	assert.False(t, notOwner.Did(), "but not the operation")

	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte("not json\n"), 0o644))
	_, err = collectOps([]string{bad}, nil)
	assert.ErrorContains(t, err, "bad.jsonl:1")
}

// TestAnalyzeFaults checks the fault test's bookkeeping on made-up
// records: a run 151 ms after the deadline is late and one 149 ms after
// is not; a call that ends after its deadline + 150 ms or with an
// untyped error has no timely outcome; calls go to the window they were
// invoked in; refusals by a non-owner do not count as runs.
func TestAnalyzeFaults(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	s := func(d time.Duration) time.Time { return t0.Add(d) }
	windows := []faultWindow{
		{name: "one", from: s(0), start: s(time.Second), end: s(2 * time.Second), to: s(10 * time.Second)},
		{name: "two", from: s(10 * time.Second), start: s(11 * time.Second), end: s(12 * time.Second), to: s(20 * time.Second)},
	}
	call := func(id string, invoke, took time.Duration, outcome string) callRecord {
		return callRecord{OpID: id, Kind: "GetVm", VM: "vm-" + id + "-0000", Invoke: s(invoke), Done: s(invoke + took), Outcome: outcome}
	}
	calls := []callRecord{
		call("early", -time.Second, 10*time.Millisecond, "ok"),                 // before the first window: counts in it
		call("late", 0, fdTimeout, "timeout"),                                  // ran 151 ms after its deadline
		call("edge", 500*time.Millisecond, fdTimeout, "timeout"),               // ran 149 ms after: within the bound
		call("slow", 3*time.Second, fdTimeout+151*time.Millisecond, "timeout"), // its timeout came too late
		call("untyped", 4*time.Second, time.Second, "unknown"),
		call("twice", 11*time.Second, 20*time.Millisecond, "ok"),
		call("guarded", 12*time.Second+time.Millisecond, 20*time.Millisecond, "not_owner"),
		call("lost", 30*time.Second, 20*time.Millisecond, "ok"), // after the last window: counts in it; no run logged
	}
	run := func(at time.Duration, errCode string) execution {
		return execution{Node: "n", Label: "A1", Op: "handle", ServiceID: "vmInstance.n", Start: s(at), Err: errCode}
	}
	c := &collected{Owner: map[string][]execution{
		"early":   {run(-time.Second+time.Millisecond, "")},
		"late":    {run(fdTimeout+fdBound+time.Millisecond, "")},
		"edge":    {run(500*time.Millisecond+fdTimeout+fdBound-time.Millisecond, "")},
		"slow":    {{Op: "reject", Err: "timeout", ServiceID: "vmInstance.n", Start: s(9 * time.Second)}},
		"twice":   {run(11*time.Second+time.Millisecond, ""), run(11*time.Second+2*time.Millisecond, "")},
		"guarded": {run(12*time.Second+2*time.Millisecond, "not_owner"), run(12*time.Second+3*time.Millisecond, "not_owner")},
	}, Portal: map[string][]execution{}}

	rows := analyzeFaults(windows, calls, c)
	require.Len(t, rows, 2)
	one, two := rows[0], rows[1]
	assert.Equal(t, 5, one.calls)
	assert.Equal(t, map[string]int{"ok": 1, "timeout": 3, "unknown": 1}, one.outcomes)
	require.Len(t, one.lateRuns, 1, "only the run 151 ms after its deadline is late")
	assert.Equal(t, "late", one.lateRuns[0].call.OpID)
	var untimely []string
	for _, u := range one.untimely {
		untimely = append(untimely, u.OpID)
	}
	assert.ElementsMatch(t, []string{"slow", "untyped"}, untimely)
	assert.Equal(t, 1, one.refusedLate)
	assert.ElementsMatch(t, []string{"late", "edge"}, one.ranAfterTimeout)
	assert.Equal(t, 2, one.failedAfter, "slow and untyped failed after the fault's end")

	assert.Equal(t, 3, two.calls)
	assert.Equal(t, []string{"twice"}, two.twice, "runs refused by a non-owner do not count")
	assert.Empty(t, two.lateRuns)
	assert.Equal(t, 1, two.okWithoutRun, "the successful call with no run logged")
	assert.Equal(t, 1, two.failedAfter)

	report := faultReport(rows, c, 0, time.Minute)
	assert.Contains(t, report, "| one | 5 | ok 1, timeout 3, unknown 1 | 1 | 2 |")
	assert.Contains(t, report, "ran twice: 1 calls, e.g.")
	assert.Contains(t, report, "1 late runs")
	assert.True(t, strings.Contains(report, "call twice GetVm"), "examples describe the calls")
}

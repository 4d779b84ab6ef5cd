package main

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
)

// queuedBatch is the one-way messages a scenario put in the queues of
// nodes that died.
type queuedBatch struct {
	ops     map[string]string    // op id -> the VM it is about
	node    map[string]string    // op id -> the node whose queue it was put in
	dead    map[string]string    // the nodes killed, UUID -> label
	killed  time.Time            // when the last of them was
	evicted map[string]time.Time // dead node -> its eviction, by the live nodes' logs
}

func newQueuedBatch() *queuedBatch {
	return &queuedBatch{ops: map[string]string{}, node: map[string]string{}, dead: map[string]string{}, evicted: map[string]time.Time{}}
}

// queuedRuns is what the op logs tell of a batch: its messages' runs on
// the nodes that are not dead (a handle without error). A one-way message
// forwarded by a node whose ring named another owner shows as a handle
// there too, so runs may count a forward as a run.
type queuedRuns struct {
	runs    int                  // runs in all
	missing []string             // op ids without a run, sorted
	twice   []string             // op ids run more than once, sorted
	last    time.Time            // the latest first run
	firstOf map[string]time.Time // dead node -> the earliest run of its messages
}

// runs reads the batch's runs from c.
func (b *queuedBatch) runs(c *collected) queuedRuns {
	r := queuedRuns{firstOf: map[string]time.Time{}}
	for op := range b.ops {
		n := 0
		var first time.Time
		for _, e := range c.Owner[op] {
			if e.Op != bus.OpHandle.String() || e.Err != "" || b.dead[e.Node] != "" {
				continue
			}
			n++
			if first.IsZero() || e.Start.Before(first) {
				first = e.Start
			}
		}
		r.runs += n
		switch {
		case n == 0:
			r.missing = append(r.missing, op)
			continue
		case n > 1:
			r.twice = append(r.twice, op)
		}
		if first.After(r.last) {
			r.last = first
		}
		if f, ok := r.firstOf[b.node[op]]; !ok || first.Before(f) {
			r.firstOf[b.node[op]] = first
		}
	}
	slices.Sort(r.missing)
	slices.Sort(r.twice)
	return r
}

// queuedFigures notes, from the complete op logs, what became of the
// batch of s: handled, more than once, and when the last ran.
func (s *zqScenario) queuedFigures(t *testing.T, c *collected) {
	t.Helper()
	b := s.batch
	r := b.runs(c)
	handled := len(b.ops) - len(r.missing)
	text := fmt.Sprintf("%d of %d queued one-way messages handled by live nodes (%d runs; %d ran more than once)",
		handled, len(b.ops), r.runs, len(r.twice))
	if !r.last.IsZero() {
		text += fmt.Sprintf(", the last %s after the kill", ms(r.last.Sub(b.killed)))
	}
	var evicted []string
	for _, node := range slices.Sorted(maps.Keys(b.evicted)) {
		evicted = append(evicted, fmt.Sprintf("%s %s", b.dead[node], ms(b.evicted[node].Sub(b.killed))))
	}
	if len(evicted) > 0 {
		text += "; evicted after the kill: " + strings.Join(evicted, ", ")
	}
	s.figure("%s", text)
	var evidence strings.Builder
	for _, op := range r.missing[:min(len(r.missing), 10)] {
		fmt.Fprintf(&evidence, "  %s (vm %s, queued for %s):\n", op, b.ops[op][:8], b.dead[b.node[op]])
		for _, e := range c.Owner[op] {
			fmt.Fprintf(&evidence, "    %s\n", e)
		}
	}
	s.check(t, len(r.missing) == 0, "every queued one-way message is handled at least once (complete op logs)", evidence.String())
}

// takeovers returns, for each VM of vms that answered successfully from a
// node other than notNode in a call that ended after from, how long after
// from the first such call ended; and the VMs without one.
func takeovers(calls []callRecord, vms []string, from time.Time, notNode string) (map[string]time.Duration, []string) {
	want := map[string]bool{}
	for _, vm := range vms {
		want[vm] = true
	}
	first := map[string]time.Duration{}
	for _, c := range calls {
		if !want[c.VM] || c.Outcome != "ok" || c.Node == notNode || c.Done.Before(from) {
			continue
		}
		if d, ok := first[c.VM]; !ok || c.Done.Sub(from) < d {
			first[c.VM] = c.Done.Sub(from)
		}
	}
	var missing []string
	for _, vm := range vms {
		if _, ok := first[vm]; !ok {
			missing = append(missing, vm)
		}
	}
	return first, missing
}

// outcomesOf counts by outcome the calls about vms invoked in [from, to).
func outcomesOf(calls []callRecord, vms []string, from, to time.Time) map[string]int {
	m := map[string]int{}
	for _, c := range calls {
		if slices.Contains(vms, c.VM) && !c.Invoke.Before(from) && c.Invoke.Before(to) {
			m[c.Outcome]++
		}
	}
	return m
}

// vmCallsEvidence lists, for up to five of vms, the calls about it that
// ended after from: when, how, and on which node.
func vmCallsEvidence(calls []callRecord, vms []string, from time.Time, labels map[string]string) string {
	var b strings.Builder
	for _, vm := range vms[:min(len(vms), 5)] {
		fmt.Fprintf(&b, "  vm %s:\n", vm[:8])
		n := 0
		for _, c := range slices.SortedFunc(slices.Values(calls), func(a, b callRecord) int { return a.Invoke.Compare(b.Invoke) }) {
			if c.VM != vm || c.Done.Before(from) {
				continue
			}
			if n++; n > 12 {
				b.WriteString("    …\n")
				break
			}
			fmt.Fprintf(&b, "    %s %s invoked %s (+%s), ended after %s: %s", c.OpID, c.Kind, c.Invoke.Format(clockFormat),
				ms(c.Invoke.Sub(from)), ms(c.Took()), c.Outcome)
			if c.Node != "" {
				fmt.Fprintf(&b, " from %s", labels[c.Node])
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// unusualOutcomes returns, for each outcome other than ok, timeout and
// node_left, the first call that had it.
func unusualOutcomes(calls []callRecord) map[string]callRecord {
	m := map[string]callRecord{}
	for _, c := range calls {
		switch c.Outcome {
		case "ok", "timeout", "node_left":
		default:
			if _, ok := m[c.Outcome]; !ok {
				m[c.Outcome] = c
			}
		}
	}
	return m
}

// ranAfterNodeLeft returns the op ids of r's calls told node_left whose
// operation ran on an owner all the same.
func ranAfterNodeLeft(r faultRow) []string {
	var out []string
	for id, o := range r.ops {
		if o.call.Outcome != string(message.ErrNodeLeft.Code) {
			continue
		}
		if slices.ContainsFunc(o.owner, execution.Did) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// othersThan returns the processes of procs but the one of node.
func othersThan(procs []*child, node string) []*child {
	return slices.DeleteFunc(slices.Clone(procs), func(c *child) bool { return c.id == node })
}

// evictionText describes the first eviction line found, relative to from.
func evictionText(ev logLine, by *child, ok bool, from time.Time) string {
	if !ok {
		return "no peer logged it"
	}
	return fmt.Sprintf("%s, %s after the cut: %s", by.label, ms(ev.At.Sub(from)), ev.Text)
}

// logTail returns, as text, the last n lines c logged since since.
func logTail(c *child, since time.Time, n int) string {
	var lines []logLine
	for _, l := range c.logLines() {
		if !l.At.Before(since) {
			lines = append(lines, l)
		}
	}
	return linesText(lines[max(0, len(lines)-n):])
}

// drainWords mark the log lines about evictions, drains, leaves and
// queues.
var drainWords = []string{"evicted", "drain", "reroute", "queue", "leave", `msg="node left"`}

// drainLines returns the lines of procs since since about evictions,
// drains, leaves and queues, each prefixed with its node's label, in
// time order.
func drainLines(procs []*child, since time.Time) []logLine {
	var out []logLine
	for _, c := range procs {
		for _, l := range c.logLines() {
			if !l.At.Before(since) && slices.ContainsFunc(drainWords, func(w string) bool { return strings.Contains(l.Text, w) }) {
				l.Text = c.label + ": " + l.Text
				out = append(out, l)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b logLine) int { return a.At.Compare(b.At) })
	return out
}

// linesText is the lines' texts, indented, at most 30 of them.
func linesText(lines []logLine) string {
	if len(lines) == 0 {
		return "    (none)"
	}
	var b strings.Builder
	for i, l := range lines {
		if i == 30 {
			fmt.Fprintf(&b, "    … and %d more\n", len(lines)-i)
			break
		}
		fmt.Fprintf(&b, "    %s\n", tail(l.Text, 400))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// statesText is one queue state per line.
func statesText(states []queueState) string {
	var parts []string
	for _, q := range states {
		parts = append(parts, "    "+q.String())
	}
	return strings.Join(parts, "\n")
}

// countEvictions counts the evictions among lines: the heartbeat
// monitor's "evicted a node" lines (the node logs each eviction again,
// and the evicted node "evicted by peers").
func countEvictions(lines []logLine) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l.Text, "heartbeat: evicted a node") {
			n++
		}
	}
	return n
}

// leftLine is what refnode serve prints once it has left.
var leftLine = regexp.MustCompile(`(?m)^left: +in (\S+)$`)

// leftIn returns the duration a node printed in its "left:" line.
func leftIn(stdout string) (string, error) {
	m := leftLine.FindStringSubmatch(stdout)
	if m == nil {
		return "", errors.New(`no "left:    in …" line on its stdout`)
	}
	if _, err := time.ParseDuration(m[1]); err != nil {
		return "", fmt.Errorf("left: in %q: %w", m[1], err)
	}
	return m[1], nil
}

// ms is d to the millisecond.
func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// zqReport formats the scenarios as markdown: one row per scenario,
// then every broken property with its evidence.
func zqReport(ss []*zqScenario, rows []faultRow, stranded []queueState, c *collected, took time.Duration) string {
	def := heartbeat.DefaultConfig()
	var b strings.Builder
	fmt.Fprintf(&b, "### Queues and zombies under faults\n\n")
	fmt.Fprintf(&b, "3 `refnode serve` processes on RabbitMQ + PostgreSQL, default heartbeat (beat %s, lease %s, evict %s), "+
		"each node reaching the broker and the database through its own TCP proxy, each scenario starting from 3 healthy nodes. "+
		"Load: %d VMs called through api.portal by one client at %d calls/s, one call per VM at a time, %s deadline; in (a) a "+
		"second caller reads the cut node's VMs at %d calls/s, so each is called again within about 0.2 s. One-way messages "+
		"are GetVm sent straight to a node's vmInstance queue, each with its own x-op header and a %s deadline.\n\n",
		def.Interval, def.Lease, def.EvictAfter, fdVMs, fdRate, fdTimeout, zqWatchRate, zqSendTimeout)
	fmt.Fprintf(&b, "*late runs*: operations that started on their owner more than %s after their caller's deadline; "+
		"*no timely outcome*: calls without a reply or a typed error %s after their deadline; *recovery*: from the fault's end "+
		"(the heal, the kill, the restart) until every VM had a successful call; *node_left, ran*: calls told `node_left` (outcome "+
		"unknown) whose operation ran on an owner all the same, before its deadline: a request drained from a dead node's queue "+
		"runs on the resource's new owner.\n\n", fdBound, fdBound)
	fmt.Fprintf(&b, "| scenario | calls | outcomes | late runs | no timely outcome | node_left, ran | recovery | measured | acceptance |\n")
	fmt.Fprintf(&b, "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | --- |\n")
	for i, s := range ss {
		r := rows[i]
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %d | %d | %s | %s | %s |\n", s.w.name, r.calls, outcomes(r.outcomes), len(r.lateRuns),
			len(r.untimely), len(ranAfterNodeLeft(r)), recoveryText(r.w), strings.Join(s.figures, "; "),
			met(len(s.broken) == 0 && len(r.lateRuns) == 0 && len(r.untimely) == 0))
	}
	fmt.Fprintf(&b, "\nQueues of nodes that died or left, still on the broker once every node stopped: %d", len(stranded))
	for _, q := range stranded {
		fmt.Fprintf(&b, "; %s", q)
	}
	fmt.Fprintf(&b, ". Op logs: %d lines", c.Lines)
	if c.Partial > 0 {
		fmt.Fprintf(&b, " (%d cut short by a SIGKILL)", c.Partial)
	}
	fmt.Fprintf(&b, ". Whole test: %s.\n", took.Round(time.Second))
	for i, s := range ss {
		r := rows[i]
		if len(s.broken) == 0 && len(r.lateRuns) == 0 && len(r.untimely) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n#### %s\n\nFault from %s to %s.\n", s.w.name, s.w.start.Format(clockFormat), s.w.end.Format(clockFormat))
		for _, br := range s.broken {
			what, evidence, _ := strings.Cut(br, "\n")
			fmt.Fprintf(&b, "\nNOT met: %s\n\n```\n%s\n```\n", what, strings.TrimRight(evidence, "\n"))
		}
		if len(r.lateRuns) > 0 {
			fmt.Fprintf(&b, "\n%d late runs, by lateness after the deadline: %s (listed in the test's failure)\n", len(r.lateRuns), lateSpread(r.lateRuns))
		}
		if len(r.untimely) > 0 {
			fmt.Fprintf(&b, "\n%d calls without a timely outcome, by outcome: %s (listed in the test's failure)\n", len(r.untimely), untimelyOutcomes(r.untimely))
		}
	}
	return b.String()
}

// TestZombieFigures checks the queues-and-zombies test's bookkeeping on
// made-up records: the per-VM takeover, the runs of queued messages, the
// log lines and the "left:" line.
func TestZombieFigures(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	s := func(d time.Duration) time.Time { return t0.Add(d) }
	call := func(vm string, done time.Duration, outcome, node string) callRecord {
		return callRecord{OpID: "op-" + vm, Kind: "GetVm", VM: vm, Invoke: s(done - 100*time.Millisecond), Done: s(done), Outcome: outcome, Node: node}
	}
	calls := []callRecord{
		call("vm-1", -time.Second, "ok", "b"),        // before the cut: no takeover
		call("vm-1", 2*time.Second, "node_left", ""), // failed
		call("vm-1", 3*time.Second, "ok", "a"),       // from the zombie itself
		call("vm-1", 3500*time.Millisecond, "ok", "b"),
		call("vm-1", 3200*time.Millisecond, "ok", "c"), // out of order: the earliest counts
		call("vm-2", 5*time.Second, "ok", "a"),
		call("vm-9", time.Second, "ok", "b"), // not one of the VMs asked about
	}
	took, missing := takeovers(calls, []string{"vm-1", "vm-2"}, t0, "a")
	assert.Equal(t, map[string]time.Duration{"vm-1": 3200 * time.Millisecond}, took)
	assert.Equal(t, []string{"vm-2"}, missing)
	assert.Equal(t, map[string]int{"node_left": 1, "ok": 2}, outcomesOf(calls, []string{"vm-1"}, t0, s(3300*time.Millisecond)))

	b := newQueuedBatch()
	b.dead["d1"] = "B1"
	b.killed = t0
	for i, op := range []string{"q1", "q2", "q3"} {
		b.ops[op] = fmt.Sprintf("vm-%d", i)
		b.node[op] = "d1"
	}
	run := func(node string, at time.Duration, op, errCode string) execution {
		return execution{Node: node, Label: node, Op: op, ServiceID: "vmInstance." + node, Start: s(at), Err: errCode}
	}
	c := &collected{Owner: map[string][]execution{
		"q1": {run("d1", time.Second, "handle", ""), run("n2", 4*time.Second, "handle", "")},   // the dead node's own run does not count
		"q2": {run("n2", 5*time.Second, "handle", ""), run("n3", 6*time.Second, "handle", "")}, // twice
		"q3": {run("n2", 4*time.Second, "release", "not_owner"), run("n3", 7*time.Second, "handle", "not_owner")},
	}}
	r := b.runs(c)
	assert.Equal(t, 3, r.runs)
	assert.Equal(t, []string{"q3"}, r.missing, "a release and a refusal are no runs")
	assert.Equal(t, []string{"q2"}, r.twice)
	assert.Equal(t, s(5*time.Second), r.last, "the latest first run")
	assert.Equal(t, s(4*time.Second), r.firstOf["d1"])

	log := "time=2025-03-01T12:00:03.100Z level=INFO msg=\"heartbeat: evicted a node cut off from the bus\" peer=d1\n" +
		"time=2025-03-01T12:00:03.101Z level=WARN msg=\"evicted a node cut off from the bus\" member=d1\n" +
		"not a log line evicted a node d1\n" +
		"time=2025-03-01T12:00:04Z level=INFO msg=\"drained the queues of a node that left\" peer=d1 queues=4\n"
	lines := grepLog(log, "evicted a node", "d1")
	if assert.Len(t, lines, 2) {
		assert.Equal(t, s(3100*time.Millisecond), lines[0].At)
	}
	assert.Equal(t, 1, countEvictions(lines), "one eviction, logged by the monitor and by the node")
	assert.Len(t, grepLog(log), 3, "every slog line")

	row := faultRow{ops: map[string]op{
		"left-ran":  {call: callRecord{Outcome: "node_left"}, owner: []execution{run("n2", time.Second, "handle", "")}},
		"left-not":  {call: callRecord{Outcome: "node_left"}, owner: []execution{run("n2", time.Second, "handle", "not_owner")}},
		"left-none": {call: callRecord{Outcome: "node_left"}},
		"ok":        {call: callRecord{Outcome: "ok"}, owner: []execution{run("n2", time.Second, "handle", "")}},
	}}
	assert.Equal(t, []string{"left-ran"}, ranAfterNodeLeft(row), "a refusal by a non-owner is no run")

	d, err := leftIn("node:    x\nleaving: interrupt\nleft:    in 312ms\n")
	assert.NoError(t, err)
	assert.Equal(t, "312ms", d)
	_, err = leftIn("leaving: interrupt\n")
	assert.Error(t, err)
}

package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/service"
)

// The fast-path test: the session-lock fast path (heartbeat.Config
// SessionLocks with ConfirmDead) evicts dead processes only, never a live
// node whose links falter.
const (
	fpVMs     = 40              // VMs the load calls, one call per VM at a time
	fpRate    = 40              // calls started per second
	fpTimeout = 5 * time.Second // each call's deadline
	// fpBound is how late after its deadline a call may end: fdBound,
	// 100 ms plus the cluster clock's 50 ms.
	fpBound = fdBound
	// fpObserve is how long the load goes on after each heal before the
	// cluster's settling is awaited: EvictAfter, by when a record left
	// late by the fault has been evicted or has beaten again, and several
	// rounds for the fast path, which acts within a round of a free lock.
	fpObserve = 3 * time.Second
	// fpBoundWait bounds every wait that is not an acceptance figure
	// (warm-up, settling); generous, as the machine is shared.
	fpBoundWait = 30 * time.Second
	// fpSessionEnded is the line a monitor logs when the fast path
	// evicts a peer.
	fpSessionEnded = "heartbeat: evicted a node whose database session ended"
	// fpNotableMax bounds the log lines quoted per phase.
	fpNotableMax = 16
	// fpLineMax bounds a quoted line, in characters.
	fpLineMax = 260
	// fpUnconfirmed is the line (at debug level) a monitor logs when a
	// peer's beat is late and its lock free, but ConfirmDead says the
	// peer still has its consumers: the fast path held back.
	fpUnconfirmed = "heartbeat: a peer's session lock is free but it is not confirmed dead"
	// fpUnconfirmable is the line (at debug level) when ConfirmDead
	// failed: the fast path held back too.
	fpUnconfirmable = "heartbeat: could not confirm a peer's death"
)

// fpRules are the heartbeat monitor's eviction lines, by rule.
var fpRules = []struct{ rule, line string }{
	{"session", fpSessionEnded},
	{"beats", "heartbeat: evicted a node that stopped beating"},
	{"bus", "heartbeat: evicted a node cut off from the bus"},
}

// fpPhase is one fault on a healthy, agreed cluster under load.
type fpPhase struct {
	name   string
	hold   time.Duration // from the injection to the heal; 0: heal at once
	inject func(t *testing.T, fc *faultCluster) (heal func())
	// strict: nobody may be evicted, by any rule, and every node keeps
	// its epoch. Otherwise node A's fate is reported, and only its peers
	// must be spared.
	strict bool
}

// fpPhases are the five faults, in order.
var fpPhases = []fpPhase{
	{name: "1. node A's broker link cut for 2s", hold: 2 * time.Second, inject: func(t *testing.T, fc *faultCluster) func() {
		a := fc.Node(0)
		a.CutBus()
		return a.HealBus
	}},
	{name: "2. node A frozen (SIGSTOP) for 1.5s", hold: 1500 * time.Millisecond, strict: true, inject: func(t *testing.T, fc *faultCluster) func() {
		a := fc.Node(0)
		a.Pause(t)
		return func() { a.Resume(t) }
	}},
	{name: "3. node A's database link blackholed for 1.5s", hold: 1500 * time.Millisecond, strict: true, inject: func(t *testing.T, fc *faultCluster) func() {
		p := fc.Node(0).DB
		p.Stall() // holds the bytes both ways, every socket kept open
		return p.Heal
	}},
	{name: "4. every node's database connections reset at once", strict: true, inject: func(t *testing.T, fc *faultCluster) func() {
		for _, n := range fc.Nodes() {
			n.DB.Cut()
		}
		return func() {
			for _, n := range fc.Nodes() {
				n.DB.Heal()
			}
		}
	}},
	{name: "5. node A's database connections reset", inject: func(t *testing.T, fc *faultCluster) func() {
		p := fc.Node(0).DB
		p.Cut()
		return p.Heal
	}},
}

// TestFastPathSparesTheLiving proves that the session-lock fast path
// ("heartbeat: evicted a node whose database session ended") never fires
// for a live node. It runs three `refnode serve` processes on RabbitMQ
// and PostgreSQL, then on MariaDB, with the default heartbeat timing
// (beat 500 ms, lease 2 s, evict 3 s, session locks on; package service
// sets ConfirmDead to ask the broker whether the peer's membership queue
// lost its consumers), each node through its own proxies, and a client
// calling 40 VMs through api.portal at 40 calls a second (GetVm; StartVm
// or StopVm on every 5th VM), each call with a 5 s deadline. Five faults,
// one at a time, each on a healthy, agreed cluster with the load
// running, each healed and followed by 3 s of load and the rings agreeing
// again with no lease expired:
//
//  1. node A's broker link cut for 2 s: A loses its consumers but keeps
//     its session lock, so the fast path cannot apply; the bus rule (bus
//     down past the 2 s lease) may evict A, which rejoins: reported.
//  2. node A frozen (SIGSTOP) for 1.5 s, inside its 2 s lease: its beat
//     is late but its lock held; nobody is evicted, A keeps its epoch.
//  3. node A's database link blackholed for 1.5 s (proxy Stall: bytes
//     held both ways, no connection reset): A's beats time out while the
//     database keeps its session; nobody is evicted, A keeps its epoch.
//  4. every node's database connections reset at once (Cut, then Heal at
//     once): every lock is free until its node takes it again; no
//     eviction of any kind, every node keeps its epoch.
//  5. node A's database connections reset: A re-takes its lock within a
//     round and nobody is evicted, or A is evicted and rejoins: reported.
//
// In every phase: no node logs the fast path's eviction (no process dies
// in this test, so the whole of every log is checked at the end too);
// every call ends with a reply or a typed error by its deadline plus
// 150 ms, and none with an untyped ("unknown") error; A's peers keep
// their epochs; and, on PostgreSQL, no committed VM write is stale (a
// commit under a fence token below an earlier commit's of the same VM)
// and no token has two owners, by the chaos test's audit trigger set on
// the VM table (chaos_audit_test.go).
//
// It prints a table per phase (each node's epoch before and after, the
// evictions it made by rule, the free locks of late peers that
// ConfirmDead held back, its lease, its beats, its own session lock's
// events; the calls by outcome, the audit, the membership and session
// log lines) and a summary per database. Figures from eighteen clusters
// (nine runs, both databases): in phase 1 the bus rule evicted A every
// time, 2.05-2.85 s after the cut (bus down 2.01-2.40 s), and A rejoined
// with a new epoch about a second later; phases 2-5 evicted nobody (in
// phase 2 A's lease ran out once: its last beat came up to a beat
// before the freeze). In phase 5 A found its session ended 31-500 ms
// after the reset (within a round) and took its lock again; in phase 4
// the nodes found theirs ended 2 ms-1.4 s after it. A node sometimes
// could not take its lock again at once (its link still cut, or its old
// session not yet ended by the database) and retried each round. In
// phases 4 and 5 a peer found a live node's lock free while its beat was
// a quarter Interval late up to 4 times a phase: ConfirmDead (the node
// still had its consumers) held the fast path back each time. 0 calls
// late or untyped; 0 stale writes in 24-39 audited commits a phase. The
// whole test takes about 60 s.
func TestFastPathSparesTheLiving(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Runs: "the fast-path test runs processes for about a minute", FullSpeed: true, Timeout: 5 * time.Minute})
	testStart := time.Now()
	for _, db := range []struct {
		name string
		db   procDB
	}{{"postgres", onPostgres}, {"mariadb", onMariaDB}} {
		t.Run(db.name, func(t *testing.T) { fastPath(t, ctx, broker, db.db, db.name) })
	}
	t.Logf("the fast-path test took %s", since(testStart))
}

// fastPath runs the five phases on a new cluster on db.
func fastPath(t *testing.T, ctx context.Context, broker string, db procDB, dbName string) {
	start := time.Now()
	fc := newFaultCluster(t, ctx, broker, faultOptions{Nodes: 3, Name: "fastpath", DB: db, LogLevel: "debug"})
	fc.Start(t, ctx)
	var audit *chaosAudit
	if db == onPostgres {
		// The chaos test's audit trigger, on the VM table: a row for
		// every committed update of a VM (StartVm, StopVm, a sweeper's
		// repair) with its fence token and claim.
		audit = newChaosAudit(fc.tables.db, fc.tables.base)
		audit.images = fc.tables.base + "_refnode_vms"
		t.Cleanup(func() { // before the cluster's cleanup drops the tables
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			assert.NoError(t, audit.remove(cctx), "remove the audit trigger")
		})
		require.NoError(t, audit.install(ctx))
	}
	cl := fc.Client(t, ctx)
	vms := createVMs(t, ctx, cl, fpVMs)
	t.Logf("%s: 3 nodes serving, %d VMs created %s after the subtest began: %s", dbName, len(vms), since(start), fc.describe())

	var results []*fpResult
	for _, p := range fpPhases {
		r := runFastPath(t, ctx, fc, cl, vms, p, audit)
		results = append(results, r)
		t.Logf("on %s:\n%s", dbName, r.table())
		r.check(t)
	}
	// No process died: no fast-path eviction may appear in any log,
	// between the phases either.
	for _, c := range fc.all {
		if ls := c.logLines(fpSessionEnded); len(ls) > 0 {
			t.Errorf("node %s evicted a live node by the fast path:\n%s", c.label, linesText(ls))
		}
	}
	t.Logf("\n%s\nThe %s subtest took %s.", fpSummary(dbName, results), dbName, since(start))
}

// fpResult is what one phase measured.
type fpResult struct {
	phase                         fpPhase
	from, start, healed, end      time.Time // load started; fault injected; healed; load stopped
	settledIn                     time.Duration
	nodes                         []*slowNode // each node's status, first, sampled, last
	labels                        map[string]string
	evictions                     []fpEviction
	session                       map[string][]logLine // a node's session lock events, by label
	notable                       []logLine            // membership and session lines of every node, labelled
	repeats                       int                  // notable lines left out: a node's message seen before
	heldBack                      map[string][]string  // by node label: the peers whose free lock ConfirmDead refused, once a line
	calls                         []callRecord
	audited                       bool
	commits, afterLease, refusals int
	stale, twoOwners              []string
}

// fpEviction is one eviction a monitor logged.
type fpEviction struct {
	by, peer, rule string // labels, and the rule of fpRules
	at             time.Time
}

// runFastPath starts the load, waits until every VM answered, injects
// the phase's fault, heals it after its hold, lets the load run
// fpObserve more, waits until the rings agree and no lease is expired,
// then stops the load (its calls end by their deadlines) and gathers
// what the nodes logged and the database recorded.
func runFastPath(t *testing.T, ctx context.Context, fc *faultCluster, cl *service.Client, vms []string, p fpPhase, audit *chaosAudit) *fpResult {
	t.Helper()
	r := &fpResult{phase: p, labels: fc.Labels(), session: map[string][]logLine{}, heldBack: map[string][]string{}}
	for _, c := range fc.Running() {
		st, err := c.status()
		require.NoError(t, err, "%s: status of node %s", p.name, c.label)
		r.nodes = append(r.nodes, &slowNode{label: c.label, id: c.id, c: c, epoch: st.Epoch, first: deref(st.Database)})
	}

	r.from = time.Now()
	d := startDriver(cl, vms, driverOptions{Rate: fpRate, Timeout: fpTimeout})
	defer d.stop()
	_, err := d.awaitAnswered(ctx, r.from, fpBoundWait)
	require.NoError(t, err, "%s: every VM answers before the fault", p.name)
	stopSampling := sync.OnceFunc(sampleNodes(r.nodes, 250*time.Millisecond))
	defer stopSampling()

	r.start = time.Now()
	heal := p.inject(t, fc)
	sleepUntil(ctx, r.start.Add(p.hold))
	heal()
	r.healed = time.Now()
	sleepUntil(ctx, r.healed.Add(fpObserve))
	sctx, cancel := context.WithTimeout(ctx, fpBoundWait)
	err = poll(sctx, func() error { return fpSettled(fc) })
	cancel()
	r.settledIn = time.Since(r.healed)
	require.NoError(t, err, "%s: the rings agree again and no lease is expired", p.name)
	d.stop() // every call in flight ends by its deadline
	stopSampling()
	r.end = time.Now()

	r.calls = d.Calls()
	for _, n := range r.nodes {
		n.running = !exited(n.c)
		n.selfEvicted = len(fpWithin(n.c.logLines("this node was evicted"), r.from, r.end)) > 0
		if st, err := n.c.status(); err == nil {
			n.epochAfter, n.seen = st.Epoch, true
			n.last = deref(st.Database)
		}
		n.beats = n.last.Beats.Total - n.first.Beats.Total
		n.beatsFailed = n.last.Beats.TotalFailed - n.first.Beats.TotalFailed
		for _, rule := range fpRules {
			for _, l := range fpWithin(n.c.logLines(rule.line), r.from, r.end) {
				r.evictions = append(r.evictions, fpEviction{by: n.label, peer: r.label(logAttr(l.Text, "peer")), rule: rule.rule, at: l.At})
			}
		}
		for _, w := range []string{"this node's database session ended", "could not take this node's session lock"} {
			r.session[n.label] = append(r.session[n.label], fpWithin(n.c.logLines("heartbeat: "+w), r.from, r.end)...)
		}
		slices.SortFunc(r.session[n.label], func(a, b logLine) int { return a.At.Compare(b.At) })
		r.refusals += len(fpWithin(n.c.logLines("write refused: this node no longer owns the resource"), r.from, r.end))
		for _, line := range []string{fpUnconfirmed, fpUnconfirmable} {
			for _, l := range fpWithin(n.c.logLines(line), r.from, r.end) {
				r.heldBack[n.label] = append(r.heldBack[n.label], r.label(logAttr(l.Text, "peer")))
			}
		}
		seen := map[string]bool{}
		for _, l := range fpWithin(n.c.logLines(), r.start, r.end) {
			if !slices.ContainsFunc(fpNotableWords, func(w string) bool { return strings.Contains(l.Text, w) }) {
				continue
			}
			msg := logAttr(l.Text, "msg")
			if seen[msg] {
				r.repeats++
				continue
			}
			seen[msg] = true
			r.notable = append(r.notable, logLine{At: l.At, Text: n.label + ": " + fpLineText(l.Text, r.labels)})
		}
	}
	slices.SortStableFunc(r.notable, func(a, b logLine) int { return a.At.Compare(b.At) })
	slices.SortFunc(r.evictions, func(a, b fpEviction) int { return a.at.Compare(b.at) })

	if audit != nil {
		rows, err := audit.rows(ctx)
		require.NoError(t, err, "%s: read the audit rows", p.name)
		rows = slices.DeleteFunc(rows, func(a auditRow) bool { return a.at().Before(r.from) || a.at().After(r.end) })
		index := map[string]int{}
		for i, vm := range vms {
			index[vm] = i
		}
		// Of analyzeAudit's checks, those that hold for VM rows: stale
		// writes, two-owner tokens, commits after the writer's lease (the
		// others follow the chaos clients' image names).
		f := analyzeAudit(rows, nil, index, "", heartbeat.DefaultConfig().EvictAfter, nil)
		r.audited, r.commits, r.stale, r.twoOwners, r.afterLease = true, f.commits, f.stale, f.twoOwners, f.afterLease
	}
	return r
}

// fpNotableWords mark the lines a phase's report quotes: membership
// changes, session lock events and errors.
var fpNotableWords = []string{"heartbeat: node left", "heartbeat: node joined", "evicted", "session lock", "session ended", "confirm a peer", "confirmed dead", "failed with node-left", "level=ERROR"}

// fpLineText is a log line without its time, with node UUIDs replaced by
// their labels, shortened.
func fpLineText(text string, labels map[string]string) string {
	if _, after, ok := strings.Cut(text, " "); ok {
		text = after
	}
	for id, label := range labels {
		text = strings.ReplaceAll(text, id, label)
	}
	if r := []rune(text); len(r) > fpLineMax {
		text = string(r[:fpLineMax]) + "…"
	}
	return text
}

// label is node's label (A1, B1, …), or node itself if unknown.
func (r *fpResult) label(node string) string {
	if l, ok := r.labels[node]; ok {
		return l
	}
	return node
}

// fpSettled checks that every running node serves, connected, with a
// ring of exactly the running nodes, and that no node's lease is
// expired.
func fpSettled(fc *faultCluster) error {
	if err := fc.Agreed(); err != nil {
		return err
	}
	for _, c := range fc.Running() {
		st, err := c.status()
		if err != nil {
			return err
		}
		if st.LeaseExpired {
			return fmt.Errorf("node %s's lease has expired", c.label)
		}
	}
	return nil
}

// fpWithin returns the lines from from to to, inclusive.
func fpWithin(lines []logLine, from, to time.Time) []logLine {
	return slices.DeleteFunc(linesSince(lines, from), func(l logLine) bool { return l.At.After(to) })
}

// check asserts the phase's promises.
func (r *fpResult) check(t *testing.T) {
	t.Helper()
	name := r.phase.name
	for _, e := range r.evictions {
		assert.NotEqual(t, "session", e.rule, "%s: node %s evicted live node %s by the fast path at %s", name, e.by, e.peer, e.at.Format(clockFormat))
	}
	for _, c := range r.calls {
		assert.False(t, c.Done.After(c.Deadline(fpTimeout).Add(fpBound)), "%s: call %s (%s of %s) ends by its deadline + %s; it took %s",
			name, c.OpID, c.Kind, c.VM, fpBound, c.Took().Round(time.Millisecond))
		assert.NotEqual(t, "unknown", c.Outcome, "%s: call %s ends with a reply or a typed error: %s", name, c.OpID, c.Err)
	}
	assert.Empty(t, r.stale, "%s: no stale VM write commits", name)
	assert.Empty(t, r.twoOwners, "%s: no fence token has two owners", name)
	for i, n := range r.nodes {
		if !r.phase.strict && i == 0 {
			continue // node A: reported
		}
		assert.True(t, n.seen, "%s: node %s answers its status after the phase", name, n.label)
		assert.Equal(t, n.epoch, n.epochAfter, "%s: node %s keeps its epoch", name, n.label)
		assert.False(t, n.selfEvicted, "%s: node %s is not evicted", name, n.label)
	}
	for _, e := range r.evictions {
		if r.phase.strict {
			t.Errorf("%s: nobody is evicted; node %s evicted %s (rule %s) at %s", name, e.by, e.peer, e.rule, e.at.Format(clockFormat))
		} else if e.peer != r.nodes[0].label {
			t.Errorf("%s: only node A may be evicted; node %s evicted %s (rule %s) at %s", name, e.by, e.peer, e.rule, e.at.Format(clockFormat))
		}
	}
}

// byRule is "session 0, beats 0, bus 1".
func (r *fpResult) byRule() string {
	var parts []string
	for _, rule := range fpRules {
		n := 0
		for _, e := range r.evictions {
			if e.rule == rule.rule {
				n++
			}
		}
		parts = append(parts, fmt.Sprintf("%s %d", rule.rule, n))
	}
	return strings.Join(parts, ", ")
}

// callText is the calls by outcome, with the late and unknown ones.
func (r *fpResult) callText() (outcomes string, late, unknown int, slowest time.Duration) {
	m := map[string]int{}
	for _, c := range r.calls {
		m[c.Outcome]++
		if c.Done.After(c.Deadline(fpTimeout).Add(fpBound)) {
			late++
		}
		if c.Outcome == "unknown" {
			unknown++
		}
		slowest = max(slowest, c.Took())
	}
	return outcomeText(m), late, unknown, slowest
}

// epochs is "A1 new, B1 kept, C1 kept": whether each node kept its
// epoch (the phase's table has them in full).
func (r *fpResult) epochs() string {
	var parts []string
	for _, n := range r.nodes {
		what := "kept"
		if n.epochAfter != n.epoch {
			what = "**new**"
		}
		parts = append(parts, n.label+" "+what)
	}
	return strings.Join(parts, ", ")
}

// auditText is the audit's figures, or why there are none.
func (r *fpResult) auditText() string {
	if !r.audited {
		return "not audited (the audit trigger is PostgreSQL's)"
	}
	return fmt.Sprintf("%d VM commits audited: %d stale, %d under a token with two owners, %d after the writer's lease", r.commits, len(r.stale), len(r.twoOwners), r.afterLease)
}

// table is the phase's report, in Markdown.
func (r *fpResult) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Phase %s\n\n", r.phase.name)
	fmt.Fprintf(&b, "Fault at %s, healed %s later; the rings agreed again, no lease expired, %s after the heal (after %s of load).\n\n",
		r.start.Format(clockFormat), ms(r.healed.Sub(r.start)), ms(r.settledIn), fpObserve)
	fmt.Fprintf(&b, "| node | epoch before → after | evicted (rule: peer) | free lock not confirmed dead | itself | lease expired seen | beats (failed) | own session lock |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | ---: | --- |\n")
	for _, n := range r.nodes {
		var made []string
		for _, e := range r.evictions {
			if e.by == n.label {
				made = append(made, fmt.Sprintf("%s: %s at +%s", e.rule, e.peer, ms(e.at.Sub(r.start))))
			}
		}
		fate := "no"
		if n.selfEvicted {
			fate = "**evicted**, rejoined"
		}
		var events []string
		for _, l := range r.session[n.label] {
			what := "session ended"
			if strings.Contains(l.Text, "could not take") {
				what = "lock not taken again"
			}
			events = append(events, fmt.Sprintf("%s at +%s", what, ms(l.At.Sub(r.start))))
		}
		held := map[string]int{}
		for _, peer := range r.heldBack[n.label] {
			held[peer]++
		}
		var heldText []string
		for _, peer := range slices.Sorted(maps.Keys(held)) {
			heldText = append(heldText, fmt.Sprintf("%s ×%d", peer, held[peer]))
		}
		fmt.Fprintf(&b, "| %s | %d → %d | %s | %s | %s | %s | %d (%d) | %s |\n", n.label, n.epoch, n.epochAfter, orDash(strings.Join(made, "; ")),
			orDash(strings.Join(heldText, ", ")), fate, yesNo(n.fenced), n.beats, n.beatsFailed, orDash(strings.Join(events, "; ")))
	}
	outcomes, late, unknown, slowest := r.callText()
	fmt.Fprintf(&b, "\nEvictions by rule: %s. Calls: %d, %s; %d later than deadline + %s, %d unknown; slowest %s. %s; %d writes refused by the fence.\n",
		r.byRule(), len(r.calls), outcomes, late, fpBound, unknown, ms(slowest), r.auditText(), r.refusals)
	examples := map[string]string{}
	for _, c := range r.calls {
		if c.Outcome != "ok" && examples[c.Outcome] == "" {
			examples[c.Outcome] = c.Kind + ": " + tail(c.Err, 200)
		}
	}
	for _, code := range slices.Sorted(maps.Keys(examples)) {
		fmt.Fprintf(&b, "- %s, e.g. %s\n", code, examples[code])
	}
	if len(r.notable) > 0 {
		fmt.Fprintf(&b, "\nMembership and session lines from the fault on (time after the fault, node):\n\n")
		for i, l := range r.notable {
			if i == fpNotableMax {
				fmt.Fprintf(&b, "    … and %d more\n", len(r.notable)-i)
				break
			}
			fmt.Fprintf(&b, "    +%s %s\n", ms(l.At.Sub(r.start)), l.Text)
		}
		if r.repeats > 0 {
			fmt.Fprintf(&b, "    (%d repeats of a message a node logged above are left out)\n", r.repeats)
		}
	}
	return b.String()
}

// fpSummary is one row per phase, in Markdown.
func fpSummary(dbName string, results []*fpResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Summary on %s\n\n", dbName)
	fmt.Fprintf(&b, "| phase | evictions by rule | free locks not confirmed dead | epochs | calls by outcome | late, unknown | stale writes |\n| --- | --- | ---: | --- | --- | --- | --- |\n")
	for _, r := range results {
		outcomes, late, unknown, _ := r.callText()
		stale := "-"
		if r.audited {
			stale = fmt.Sprintf("%d of %d commits", len(r.stale), r.commits)
		}
		held := 0
		for _, peers := range r.heldBack {
			held += len(peers)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %d, %d | %s |\n", r.phase.name, r.byRule(), held, r.epochs(), outcomes, late, unknown, stale)
	}
	return b.String()
}

// orDash is s, or "-" if it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// yesNo is "yes" or "no".
func yesNo(b bool) string {
	if b {
		return "**yes**"
	}
	return "no"
}

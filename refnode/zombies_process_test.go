package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/service"
)

// The queues-and-zombies test of issue 13: a node cut off from the broker
// steps aside, a broker outage evicts nobody, and nothing is stranded in
// the queues of a node that died or left.
const (
	zqCut         = 10 * time.Second // how long broker links are cut
	zqQueued      = 50               // one-way messages queued for the node killed in (c)
	zqQueuedEach  = 5                // one-way messages queued for each node killed in (d)
	zqSendTimeout = 60 * time.Second // the deadline of those messages
	zqWatchRate   = 100              // calls/s of (a)'s second caller, on the cut node's VMs only
	zqLeaveBound  = 2 * time.Second  // (e): a leave with a dead peer takes less
	// zqBound bounds every wait that is not an acceptance figure;
	// generous, as the machine is shared.
	zqBound = 30 * time.Second
)

// zqTakeoverBound is (a)'s acceptance bound: every VM of the cut node
// answers from a peer within the eviction threshold plus 1 s of the cut.
var zqTakeoverBound = heartbeat.DefaultConfig().EvictAfter + time.Second

// TestQueuesAndZombiesUnderFaults runs three `refnode serve` processes on
// RabbitMQ and PostgreSQL with the default heartbeat timing, each through
// its own proxies, under the load of TestDeliveryUnderFaults (60 VMs
// through api.portal, 40 calls a second, 5 s deadline), and five faults,
// each starting from three healthy nodes:
//
//   - (a) a zombie: node A's broker link cut (reset) for 10 s, its
//     database reachable. Every VM it owned answers from a peer within
//     EvictAfter + 1 s of the cut, and it rejoins with a new epoch after
//     the heal.
//   - (b) every node's broker link cut for 10 s: nobody is evicted, and
//     every VM answers again after the heal.
//   - (c) node B paused, 50 one-way GetVm put in its vmInstance queue,
//     then SIGKILL: each is handled by the VMs' new owners after its
//     eviction (at least once), and its queues are gone.
//   - (d) SIGKILL of all three nodes, one-way messages put in each dead
//     node's queue, three new nodes started: every dead node's queue is
//     drained and deleted once the new cluster is ready, and the messages
//     are handled.
//   - (e) SIGKILL of node C, and at once SIGTERM of node A: A leaves in
//     under 2 s, exit 0, its queues deleted; B serves every VM after C's
//     eviction.
//
// In every scenario, as in TestDeliveryUnderFaults, no operation starts
// later than its caller's deadline plus 150 ms, and every call ends with
// a reply or a typed error by then. It prints one table, and appends it
// to the file CLOUDBUS_FAULTS_REPORT names.
func TestQueuesAndZombiesUnderFaults(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Runs: "the test runs processes for about two minutes", FullSpeed: true, Timeout: 6 * time.Minute})
	testStart := time.Now()
	fc := newFaultCluster(t, ctx, broker, faultOptions{Nodes: 3, Name: "zombies"})
	fc.Start(t, ctx)
	t.Logf("3 nodes serving and agreeing %s after the test began: %s", since(testStart), fc.describe())
	cl := fc.Client(t, ctx)
	vms := createVMs(t, ctx, cl, fdVMs)
	z := &zqRun{fc: fc, cl: cl, jan: newJanitor(t, broker), vms: vms, tag: randomHex(3)}
	z.d = startDriver(cl, vms, driverOptions{Rate: fdRate, Timeout: fdTimeout})
	t.Cleanup(z.d.stop) // before the client closes (cleanups run last-in first-out)

	var scenarios []*zqScenario
	for _, run := range []func(*testing.T, context.Context) *zqScenario{z.zombie, z.outage, z.queuedKill, z.killAll, z.leaveWithDeadPeer} {
		s := run(t, ctx)
		scenarios = append(scenarios, s)
		t.Logf("%s: %s (%s into the test)", s.w.name, strings.Join(s.figures, "; "), since(testStart))
	}
	z.d.stop()
	fc.Terminate(t, 20*time.Second) // their op logs complete
	stranded, strandedLog := z.noQueueOutlivesItsNode(t)

	ops, err := collectOps(fc.OpLogs(), fc.Labels())
	require.NoError(t, err, "read the op logs")
	windows := make([]faultWindow, len(scenarios))
	for i, s := range scenarios {
		windows[i] = s.w
		if s.batch != nil {
			s.queuedFigures(t, ops)
		}
	}
	calls := append(z.d.Calls(), z.extra...)
	rows := analyzeFaults(windows, calls, ops)
	for code, c := range unusualOutcomes(calls) {
		t.Logf("an outcome other than ok, timeout and node_left: %s, e.g. call %s %s vm %s invoked %s: %s", code, c.OpID, c.Kind, c.VM[:8], c.Invoke.Format(clockFormat), c.Err)
	}
	report := zqReport(scenarios, rows, stranded, ops, time.Since(testStart))
	t.Log("\n" + report)
	if path := os.Getenv(faultsReportVar); path != "" {
		require.NoError(t, appendFile(path, "\n"+report), "append the table to %s=%s", faultsReportVar, path)
	}
	for _, r := range rows {
		assert.Empty(t, r.lateRuns, "%s: no operation starts after its caller's deadline + %s\n%s", r.w.name, fdBound, r.lateEvidence(fc))
		assert.Empty(t, r.untimely, "%s: every call ends with a reply or a typed error by its deadline + %s\n%s", r.w.name, fdBound, r.untimelyEvidence())
		assert.False(t, r.w.recovered.IsZero(), "%s: every VM answers again within %s of the fault's end", r.w.name, fdRecoverBound)
	}
	assert.Empty(t, stranded, "no queue of a node that died or left outlives it; what the nodes logged about theirs:\n%s", strandedLog)
}

// zqRun is the state the scenarios share. Only the test's goroutine uses
// it.
type zqRun struct {
	fc    *faultCluster
	cl    *service.Client
	jan   *janitor
	d     *vmDriver    // the load
	vms   []string     // the VMs it calls
	tag   string       // random, in the op ids of the queued one-way messages
	extra []callRecord // calls of other drivers (a's second caller)
}

// zqScenario is one scenario: its window of the load, what it measured,
// and the acceptance properties it found broken, with their evidence.
type zqScenario struct {
	w       faultWindow
	figures []string
	broken  []string
	batch   *queuedBatch // the one-way messages it queued for dead nodes, if any
}

// figure notes a measurement for the report.
func (s *zqScenario) figure(format string, args ...any) {
	s.figures = append(s.figures, fmt.Sprintf(format, args...))
}

// check asserts an acceptance property; a broken one goes into the
// report with its evidence.
func (s *zqScenario) check(t *testing.T, ok bool, what, evidence string) bool {
	t.Helper()
	if !ok {
		s.broken = append(s.broken, what+"\n"+evidence)
	}
	return assert.True(t, ok, "%s: %s\n%s", s.w.name, what, evidence)
}

// begin starts a scenario: every VM answers, then the warm-up passes.
func (z *zqRun) begin(t *testing.T, ctx context.Context, name string) *zqScenario {
	t.Helper()
	s := &zqScenario{w: faultWindow{name: name, from: time.Now()}}
	_, err := z.d.awaitAnswered(ctx, s.w.from, fdRecoverBound)
	require.NoError(t, err, "%s: every VM answers before the fault", name)
	sleepUntil(ctx, s.w.from.Add(fdWarmup))
	return s
}

// owners returns the owner of each VM on the ring of the running nodes.
func (z *zqRun) owners(t *testing.T) func(vm string) string {
	t.Helper()
	r := ringOver(t, idsOf(z.fc.Running()))
	return func(vm string) string { return mustOwner(t, r, vm) }
}

// ownedBy returns the VMs node owns on the ring of the running nodes.
func (z *zqRun) ownedBy(t *testing.T, node string) []string {
	owner := z.owners(t)
	return slices.DeleteFunc(slices.Clone(z.vms), func(vm string) bool { return owner(vm) != node })
}

// bounded returns a context for a wait that is not an acceptance figure:
// it ends zqBound from now.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, zqBound)
}

// zombie is (a): node A's broker link cut for 10 s, its database
// reachable.
func (z *zqRun) zombie(t *testing.T, ctx context.Context) *zqScenario {
	fc := z.fc
	victim := fc.Node(0)
	id := victim.ID()
	its := z.ownedBy(t, id)
	before, err := victim.Proc().status()
	require.NoError(t, err)
	// A second caller on the victim's VMs only, each called again within
	// 0.2 s of its last call ending: the takeover's resolution.
	watch := startDriver(z.cl, its, driverOptions{Rate: zqWatchRate, Timeout: fdTimeout, OperateEvery: -1})
	s := z.begin(t, ctx, fmt.Sprintf("(a) node %s's broker link cut for %s, its database reachable", victim.Label(), zqCut))
	s.w.start = time.Now()
	victim.CutBus()
	sleepUntil(ctx, s.w.start.Add(zqCut))
	victim.HealBus()
	s.w.end = time.Now()

	// It rejoins: a new epoch, in every ring again.
	rctx, cancel := bounded(ctx)
	var epoch int64
	err = poll(rctx, func() error {
		st, err := victim.Proc().status()
		if err != nil {
			return err
		}
		if epoch = st.Epoch; epoch == before.Epoch {
			return fmt.Errorf("node %s is %s with epoch %d still", victim.Label(), st.State, epoch)
		}
		return fc.Agreed()
	})
	cancel()
	rejoined := time.Since(s.w.end)
	settle(t, ctx, fc, z.d, &s.w)
	watch.stop()
	z.extra = append(z.extra, watch.Calls()...)

	calls := append(z.d.Calls(), watch.Calls()...)
	took, missing := takeovers(calls, its, s.w.start, id)
	lo, med, hi := spread(slices.Collect(maps.Values(took)))
	peers := othersThan(fc.Running(), id)
	ev, by, evicted := firstLogged(peers, "evicted a node", id)
	s.figure("its %d VMs answered from a peer %s / %s / %s after the cut (min / median / max)", len(its), ms(lo), ms(med), ms(hi))
	if evicted {
		s.figure("%s evicted it %s after the cut", by.label, ms(ev.At.Sub(s.w.start)))
	}
	s.figure("calls about its VMs during the cut: %s", outcomes(outcomesOf(calls, its, s.w.start, s.w.end)))
	var slow []string
	for vm, d := range took {
		if d > zqTakeoverBound {
			slow = append(slow, vm)
		}
	}
	slices.Sort(slow)
	s.check(t, len(missing) == 0 && len(slow) == 0,
		fmt.Sprintf("every VM node %s owned answers from a peer within %s of the cut", victim.Label(), zqTakeoverBound),
		fmt.Sprintf("%d VMs never answered from a peer, %d later than %s; the peers' eviction: %s\n%s",
			len(missing), len(slow), zqTakeoverBound, evictionText(ev, by, evicted, s.w.start),
			vmCallsEvidence(calls, append(missing, slow...), s.w.start, fc.Labels())))
	if s.check(t, err == nil, fmt.Sprintf("node %s rejoins after the heal with a new epoch", victim.Label()),
		fmt.Sprintf("%v; its log:\n%s", err, logTail(victim.Proc(), s.w.start, 20))) {
		s.figure("it rejoined with a new epoch %s after the heal", ms(rejoined))
	}
	return s
}

// outage is (b): every node's broker link cut for 10 s.
func (z *zqRun) outage(t *testing.T, ctx context.Context) *zqScenario {
	fc := z.fc
	s := z.begin(t, ctx, fmt.Sprintf("(b) every node's broker link cut for %s", zqCut))
	before := z.epochs(t)
	s.w.start = time.Now()
	for _, n := range fc.Nodes() {
		n.CutBus()
	}
	sleepUntil(ctx, s.w.start.Add(zqCut))
	for _, n := range fc.Nodes() {
		n.HealBus()
	}
	s.w.end = time.Now()
	settle(t, ctx, fc, z.d, &s.w)
	after := z.epochs(t)
	var evictions []logLine
	for _, c := range fc.Running() {
		for _, l := range c.logLines("evicted") {
			if !l.At.Before(s.w.start) {
				l.Text = c.label + ": " + l.Text
				evictions = append(evictions, l)
			}
		}
	}
	epochs := "every epoch unchanged"
	if before != after {
		epochs = fmt.Sprintf("epochs before %s, after %s", before, after)
	}
	s.figure("%d evictions (log lines \"evicted\" on every node since the cut: %d), %s", countEvictions(evictions), len(evictions), epochs)
	s.figure("every VM answered again %s after the heal", recoveryText(s.w))
	s.check(t, len(evictions) == 0 && before == after, "a broker outage every node sees evicts nobody",
		fmt.Sprintf("epochs before %s, after %s; log lines:\n%s", before, after, linesText(evictions)))
	return s
}

// queuedKill is (c): node B paused, 50 one-way messages put in its
// vmInstance queue, then SIGKILL.
func (z *zqRun) queuedKill(t *testing.T, ctx context.Context) *zqScenario {
	fc := z.fc
	victim := fc.Node(1)
	s := z.begin(t, ctx, fmt.Sprintf("(c) SIGKILL of node %s holding %d queued one-way GetVm", victim.Label(), zqQueued))
	id := victim.ID()
	its := z.ownedBy(t, id)
	require.NotEmpty(t, its, "node %s owns VMs", victim.Label())
	s.batch = newQueuedBatch()
	s.batch.dead[id] = victim.Label()
	s.w.start = time.Now()
	victim.Pause(t)
	z.sendQueued(t, ctx, s.batch, id, its, zqQueued, "c")
	victim.Kill(t)
	s.w.end = time.Now()
	s.batch.killed = s.w.end
	peers := fc.Running()
	z.awaitHandled(t, ctx, s, peers)
	z.awaitGone(t, ctx, s, "node "+victim.Label(), nodeQueues(fc.Prefix(), id), peers, s.w.end, "the kill")
	victim.Restart(t, ctx)
	settle(t, ctx, fc, z.d, &s.w)
	return s
}

// killAll is (d): every node killed, one-way messages put in each dead
// node's queue, three new nodes started.
func (z *zqRun) killAll(t *testing.T, ctx context.Context) *zqScenario {
	fc := z.fc
	s := z.begin(t, ctx, "(d) SIGKILL of all 3 nodes, then 3 new nodes")
	owner := z.owners(t)
	dead := fc.Running()
	s.batch = newQueuedBatch()
	var queues []string
	s.w.start = time.Now()
	for _, n := range fc.Nodes() {
		n.Kill(t)
	}
	s.batch.killed = time.Now()
	for _, c := range dead {
		s.batch.dead[c.id] = c.label
		queues = append(queues, nodeQueues(fc.Prefix(), c.id)...)
		its := slices.DeleteFunc(slices.Clone(z.vms), func(vm string) bool { return owner(vm) != c.id })
		z.sendQueued(t, ctx, s.batch, c.id, its, zqQueuedEach, "d-"+c.label)
	}
	s.w.end = time.Now() // the restart
	rctx, cancel := context.WithTimeout(ctx, 2*zqBound)
	fc.Start(t, rctx) // every node healthy, and every ring holds the new nodes alone: the dead evicted
	cancel()
	ready := time.Now()
	atReady, err := z.jan.inspectAll(queues)
	require.NoError(t, err)
	left := 0
	for _, q := range atReady {
		left += q.Messages
	}
	s.figure("cluster ready (the dead evicted from every ring) %s after the restart, %d messages then in %d dead queues still there",
		ms(ready.Sub(s.w.end)), left, len(existing(atReady)))
	peers := fc.Running()
	z.awaitGone(t, ctx, s, "the dead nodes", queues, peers, s.w.end, "the restart")
	z.awaitHandled(t, ctx, s, peers)
	settle(t, ctx, fc, z.d, &s.w)
	return s
}

// leaveWithDeadPeer is (e): node C killed, and at once node A
// terminated.
func (z *zqRun) leaveWithDeadPeer(t *testing.T, ctx context.Context) *zqScenario {
	fc := z.fc
	dead, leaver, stays := fc.Node(2), fc.Node(0), fc.Node(1)
	s := z.begin(t, ctx, fmt.Sprintf("(e) SIGKILL of node %s, at once SIGTERM of node %s", dead.Label(), leaver.Label()))
	deadID, leaverID, lc := dead.ID(), leaver.ID(), leaver.Proc()
	s.w.start = time.Now()
	dead.Kill(t)
	term := time.Now()
	require.NoError(t, lc.cmd.Process.Signal(syscall.SIGTERM))
	werr := lc.wait("SIGTERM", zqBound)
	took := time.Since(term)
	s.w.end = time.Now()
	out, _ := lc.output()
	printed, perr := leftIn(out)
	s.figure("SIGTERM %s after the kill; node %s exited %s after it (it printed \"left: in %s\")", ms(term.Sub(s.w.start)), leaver.Label(), ms(took), printed)
	if l, _, ok := firstLogged([]*child{lc}, "leave: peer did not confirm", deadID); ok {
		s.figure("its leave waited %s for dead %s's confirmation", ms(l.At.Sub(term)), dead.Label())
	}
	if kept := lc.logLines("leave: queue kept"); len(kept) > 0 {
		s.figure("it kept %d queue(s) for the survivors to drain", len(kept))
	}
	leaveLog := logTail(lc, term, 20) + "\nnode " + stays.Label() + "'s log of evictions and drains since the SIGTERM:\n" +
		linesText(drainLines([]*child{stays.Proc()}, term))
	s.check(t, werr == nil && lc.waitErr == nil && perr == nil, fmt.Sprintf("node %s exits 0 after SIGTERM, printing \"left:    in …\"", leaver.Label()),
		fmt.Sprintf("wait: %v; exit: %v; %v; stdout:\n%s\nits log since the SIGTERM:\n%s", werr, lc.waitErr, perr, out, leaveLog))
	s.check(t, took < zqLeaveBound, fmt.Sprintf("node %s leaves in under %s while node %s is dead", leaver.Label(), zqLeaveBound, dead.Label()),
		fmt.Sprintf("it took %s; its log since the SIGTERM:\n%s", ms(took), leaveLog))
	states, err := z.jan.inspectAll(nodeQueues(fc.Prefix(), leaverID))
	require.NoError(t, err)
	s.check(t, len(existing(states)) == 0, fmt.Sprintf("node %s's queues are gone when it has left", leaver.Label()),
		fmt.Sprintf("%s; its log since the SIGTERM:\n%s", statesText(states), leaveLog))

	// The node that stays evicts the dead one, then serves every VM.
	rctx, cancel := bounded(ctx)
	err = poll(rctx, fc.Agreed)
	cancel()
	require.NoError(t, err, "node %s's ring holds itself alone", stays.Label())
	if ev, _, ok := firstLogged([]*child{stays.Proc()}, "evicted a node", leaverID); ok {
		s.figure("%s evicted the leaving %s too, %s after its SIGTERM", stays.Label(), leaver.Label(), ms(ev.At.Sub(term)))
	}
	ev, _, evicted := firstLogged([]*child{stays.Proc()}, "evicted a node", deadID)
	from := time.Now()
	if evicted {
		from = ev.At
		s.figure("%s evicted %s %s after the kill", stays.Label(), dead.Label(), ms(ev.At.Sub(s.w.start)))
	}
	answered, err := z.d.awaitAnswered(ctx, from, zqBound)
	served := stays.ID()
	var strays []string
	for _, c := range z.d.Calls() {
		if c.Outcome == "ok" && !c.Invoke.Before(from) && c.Node != served {
			strays = append(strays, c.OpID+" by "+fc.Labels()[c.Node])
		}
	}
	if s.check(t, err == nil && len(strays) == 0, fmt.Sprintf("node %s serves every VM after node %s's eviction", stays.Label(), dead.Label()),
		fmt.Sprintf("%v; calls answered by another node: %v", err, strays)) {
		s.figure("every VM answered from %s %s after the kill", stays.Label(), ms(answered.Sub(s.w.start)))
	}
	z.awaitGone(t, ctx, s, "node "+dead.Label(), nodeQueues(fc.Prefix(), deadID), []*child{stays.Proc()}, s.w.start, "the kill")
	settle(t, ctx, fc, z.d, &s.w)
	return s
}

// sendQueued sends n one-way GetVm straight to node's vmInstance service,
// each about one of vms in turn, with its own x-op header and a 60 s
// deadline, and adds them to b.
func (z *zqRun) sendQueued(t *testing.T, ctx context.Context, b *queuedBatch, node string, vms []string, n int, tag string) {
	t.Helper()
	require.NotEmpty(t, vms, "node %s owns VMs", node)
	target := bus.ServiceID(api.VMService, node)
	for i := range n {
		vm := vms[i%len(vms)]
		op := fmt.Sprintf("q-%s-%s-%03d", z.tag, tag, i+1)
		// The test's ctx: its deadline is minutes away, so the message's
		// is WithTimeout's.
		err := z.cl.Bus().Send(ctx, target, api.GetVm{UUID: vm}, bus.WithTimeout(zqSendTimeout), bus.WithHeader(HeaderOp, op))
		require.NoError(t, err, "send %s to %s", op, target)
		b.ops[op] = vm
		b.node[op] = node
	}
}

// awaitHandled waits until every message of s's batch was handled on a
// node that is not dead, and notes when; peers are the nodes whose logs
// tell of the eviction and the drain.
func (z *zqRun) awaitHandled(t *testing.T, ctx context.Context, s *zqScenario, peers []*child) {
	b := s.batch
	rctx, cancel := bounded(ctx)
	defer cancel()
	var runs queuedRuns
	err := pollEvery(rctx, 250*time.Millisecond, func() error {
		c, err := collectOps(z.fc.OpLogs(), z.fc.Labels())
		if err != nil {
			return err
		}
		runs = b.runs(c)
		if len(runs.missing) > 0 {
			return fmt.Errorf("%d of %d queued messages not handled yet", len(runs.missing), len(b.ops))
		}
		return nil
	})
	s.check(t, err == nil, fmt.Sprintf("every one of the %d queued one-way messages is handled by a live node", len(b.ops)),
		fmt.Sprintf("%v\nnot handled: %s\nthe peers' log:\n%s", err, strings.Join(runs.missing[:min(len(runs.missing), 10)], ", "),
			linesText(drainLines(peers, b.killed))))
	if err != nil {
		return
	}
	for node, label := range b.dead {
		ev, by, ok := firstLogged(peers, "evicted a node", node)
		if !ok {
			continue // it may have been evicted by a node that died since
		}
		b.evicted[node] = ev.At
		first := runs.firstOf[node]
		s.check(t, !first.Before(ev.At), fmt.Sprintf("the messages queued for node %s are handled after its eviction", label),
			fmt.Sprintf("the first ran at %s; %s evicted %s at %s: %s", first.Format(clockFormat), by.label, label, ev.At.Format(clockFormat), ev.Text))
	}
}

// awaitGone waits until every queue of queues is gone (emptied into the
// live nodes and deleted), and notes how long after from (what) that
// was; peers are the nodes whose logs tell of the drains.
func (z *zqRun) awaitGone(t *testing.T, ctx context.Context, s *zqScenario, whose string, queues []string, peers []*child, from time.Time, what string) {
	rctx, cancel := bounded(ctx)
	defer cancel()
	var states []queueState
	err := pollEvery(rctx, 100*time.Millisecond, func() error {
		var err error
		if states, err = z.jan.inspectAll(queues); err != nil {
			return err
		}
		if ex := existing(states); len(ex) > 0 {
			return fmt.Errorf("%d queues left, e.g. %s", len(ex), ex[0])
		}
		return nil
	})
	gone := time.Now()
	if s.check(t, err == nil, fmt.Sprintf("the queues of %s are emptied and deleted", whose),
		fmt.Sprintf("%v\n%s\nthe live nodes' log:\n%s", err, statesText(states), linesText(drainLines(peers, s.w.start)))) {
		s.figure("the queues of %s gone %s after %s", whose, ms(gone.Sub(from)), what)
	}
}

// epochs is "A1 1, B1 1, C1 1": each running node's epoch, by its
// /status.
func (z *zqRun) epochs(t *testing.T) string {
	t.Helper()
	var parts []string
	for _, c := range z.fc.Running() {
		st, err := c.status()
		require.NoError(t, err)
		parts = append(parts, fmt.Sprintf("%s %d", c.label, st.Epoch))
	}
	return strings.Join(parts, ", ")
}

// noQueueOutlivesItsNode looks, once every node has stopped, for the
// service queues of nodes that are left on the broker: those of killed
// nodes should have been drained by the survivors, those of nodes that
// left by the nodes themselves. It returns the queues left, and what
// every node logged about evictions, drains and queues of their nodes.
func (z *zqRun) noQueueOutlivesItsNode(t *testing.T) ([]queueState, string) {
	var queues []string
	var all []*child
	for _, n := range z.fc.Nodes() {
		for _, c := range n.runs {
			queues = append(queues, nodeQueues(z.fc.Prefix(), c.id)...)
			all = append(all, c)
		}
	}
	states, err := z.jan.inspectAll(queues)
	require.NoError(t, err)
	left := existing(states)
	var lines []logLine
	for _, q := range left {
		node := q.Name[strings.LastIndexByte(q.Name, '.')+1:]
		for _, l := range drainLines(all, time.Time{}) {
			// The node's own lines name it as node=; others' as peer= or member=.
			if strings.Contains(l.Text, "node="+node) && !strings.Contains(l.Text, "evicted a node") ||
				strings.Contains(l.Text, "="+node) && strings.Contains(l.Text, "evicted") ||
				strings.Contains(l.Text, "peer="+node) && strings.Contains(l.Text, "drain") {
				lines = append(lines, l)
			}
		}
	}
	return left, linesText(lines)
}

// appendFile appends text to the file at path, creating it.
func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

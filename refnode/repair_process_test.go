package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/chaoscheck"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// The repair test: a repair is fenced and ordered against every later
// acknowledged write of its VM (issue 23, a lost acknowledged write).
const (
	// rpStall is node X's -test-stall-vm-final-write: its first VM
	// operation holds its transaction this long after its hypervisor
	// call, before its final write. The test pauses X meanwhile.
	rpStall = 5 * time.Second
	// rpSweep is every node's -vm-sweep: several sweeps run while the
	// test watches the record.
	rpSweep = 2 * time.Second
	// rpCallTimeout is the stalled StartVm's deadline: longer than the
	// eviction (about 3 s after the pause), so its caller learns of the
	// eviction (node_left) rather than of its deadline.
	rpCallTimeout = 6 * time.Second
	// rpWindow is how long past its deadline the stalled StartVm, whose
	// outcome is unknown, may take effect in the history checked with
	// porcupine. X resumes after that window, so that nothing X does
	// then can pass for that call taking effect late.
	rpWindow = 2 * time.Second
	// rpWatch is how long the test reads the record after X resumes, and
	// rpReadEvery how often.
	rpWatch     = 16 * time.Second
	rpReadEvery = 500 * time.Millisecond
	// rpBound bounds every wait that is not an acceptance figure.
	rpBound = 30 * time.Second
)

// TestRepairFencedAndOrdered reproduces issue 23's lost acknowledged
// write on three `refnode serve` processes, on RabbitMQ and PostgreSQL,
// then on RabbitMQ and MariaDB, with the default heartbeat timing (beat
// 500 ms, evict 3 s) and -vm-sweep 2s, each node through its own proxies;
// each process runs its own simulator, which cannot tell a VM's power.
// Node X (slot A) also runs with -test-stall-vm-final-write 5s.
//
// A VM that X owns gets a StartVm (deadline 6 s); X stalls after its
// hypervisor started the VM, before its final write, and the test pauses
// it (SIGSTOP). The peers evict X; the caller's outcome is unknown
// (node_left or timeout). Through the new owner the test starts and then
// stops the VM, both acknowledged (if the stalled StartVm, drained from
// X's queue, ran on the new owner first, the test stops the VM before).
// Once the stalled call's window has passed (its deadline plus 2 s) it
// resumes X (SIGCONT): X's final write fails and X journals what its
// hypervisor did with the version it had read; X rejoins with a new epoch
// and owns the VM again. For 16 s (8 sweeps) the record, read directly from the
// database, must stay stopped at the version of the acknowledged stop;
// X must log the journal entry dropped as stale, repair nothing, and
// count it (/status vms.stale_journal); and the VM's history (the calls,
// the stalled one with an unknown outcome allowed to take effect until
// 2 s past its deadline, and the reads of the record) must be
// linearizable against refnode's VM state machine (porcupine,
// chaoscheck.VM). On the code before the fix, X repaired the record to
// running from its journal, and the history was not linearizable.
//
// It prints the figures: when the stall, the pause, the eviction, the
// calls, the resume, the journal entry, the rejoin and the drop happened.
func TestRepairFencedAndOrdered(t *testing.T) {
	t.Run("PostgreSQL", func(t *testing.T) { repairScenario(t, onPostgres, "repair-pg") })
	t.Run("MariaDB", func(t *testing.T) { repairScenario(t, onMariaDB, "repair-maria") })
}

// repairScenario runs the scenario of TestRepairFencedAndOrdered on db.
func repairScenario(t *testing.T, db procDB, name string) {
	ctx, broker := startProcessTest(t, processTest{Runs: "the repair test runs processes for about two minutes", FullSpeed: true, Timeout: 3 * time.Minute})
	testStart := time.Now()
	fc := newFaultCluster(t, ctx, broker, faultOptions{Nodes: 3, Name: name, DB: db, Flags: []string{"-vm-sweep", rpSweep.String()}})
	x := fc.Node(0)
	x.Flags = append(x.Flags, "-test-stall-vm-final-write", rpStall.String())
	fc.Start(t, ctx)
	xid := x.ID()
	before, err := x.Proc().status()
	require.NoError(t, err)
	peers := othersThan(fc.Running(), xid)
	t.Logf("3 nodes on %s serving and agreeing %s after the test began: %s; node X is %s, stalling its first VM final write for %s; every node sweeps every %s",
		t.Name(), since(testStart), fc.describe(), x.Label(), rpStall, rpSweep)

	cl := fc.Client(t, ctx)
	img, err := service.Call[api.ImageReply](ctx, cl, api.AddImage{UUID: message.NewUUID(), Name: "repair"})
	require.NoError(t, err, "add an image")
	_, err = service.Call[api.HostReply](ctx, cl, api.AddHost{UUID: message.NewUUID(), Address: "10.0.4.1"})
	require.NoError(t, err, "add a host")

	// A VM that X owns: its UUID picked on the ring of the running nodes,
	// and checked by the node GetVm's reply names.
	r := ringOver(t, idsOf(fc.Running()))
	vm := message.NewUUID()
	for mustOwner(t, r, vm) != xid {
		vm = message.NewUUID()
	}
	_, err = service.Call[api.VmCreated](ctx, cl, api.CreateVm{UUID: vm, Name: "repair", ImageUUID: img.Image.UUID})
	require.NoError(t, err, "create the VM")
	got, err := service.Call[api.VmReply](ctx, cl, api.GetVm{UUID: vm})
	require.NoError(t, err)
	require.Equal(t, xid, got.Node, "node X (%s) owns VM %s", x.Label(), vm)
	require.Equal(t, cloud.VMCreated, got.VM.State)
	require.Equal(t, int64(1), got.VM.Version)

	// The VM's history: client 0 is the stalled StartVm, client 1 the
	// test's calls through the new owner, client 2 the reads of the
	// record straight from the database.
	hist := chaoscheck.NewRecorder(time.Now)
	var reads []string // the watch's reads, as "state@version"
	read := func(ctx context.Context) (cloud.VMState, int64, error) {
		op := hist.InvokeVM(2, chaoscheck.VMInput{})
		st, v, err := recordedVM(ctx, fc, vm)
		if err != nil {
			hist.Unknown(op, time.Now()) // constrains nothing
			return "", 0, err
		}
		hist.ReturnVM(op, chaoscheck.VMOutput{State: st})
		return st, v, nil
	}

	// The StartVm that X stalls in. Received whatever happens, so that no
	// goroutine outlives the test.
	type outcome struct {
		rep api.VmReply
		err error
		at  time.Time
	}
	started := make(chan outcome, 1)
	stalledOp := hist.InvokeVM(0, chaoscheck.VMInput{Op: cloud.VMOpStart})
	sent := time.Now()
	deadline := sent.Add(rpCallTimeout)
	go func() {
		cctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		rep, err := service.Call[api.VmReply](cctx, cl, api.StartVm{UUID: vm}, bus.WithTimeout(rpCallTimeout))
		started <- outcome{rep, err, time.Now()}
	}()
	var call outcome
	received := false
	awaitCall := func(bound time.Duration) bool {
		if !received {
			select {
			case call = <-started:
				received = true
			case <-time.After(bound):
			}
		}
		return received
	}
	defer awaitCall(rpCallTimeout)

	var holding logLine
	bctx, bcancel := context.WithTimeout(ctx, 10*time.Second)
	err = poll(bctx, func() error {
		ls := x.Proc().logLines("test stall: holding", "vm="+vm)
		if len(ls) == 0 {
			return errors.New("node X has not logged its stall yet")
		}
		holding = ls[0]
		return nil
	})
	bcancel()
	require.NoError(t, err, "node X stalls in the StartVm; its log:\n%s", logTail(x.Proc(), sent, 20))
	x.Pause(t)
	paused := time.Now()
	require.True(t, paused.Before(holding.At.Add(rpStall)), "node X is paused within its stall (%s after it began)", ms(paused.Sub(holding.At)))

	// The peers evict X: their rings no longer list it.
	bctx, bcancel = context.WithTimeout(ctx, rpBound)
	err = poll(bctx, func() error {
		for _, c := range peers {
			st, err := c.status()
			if err != nil {
				return err
			}
			if slices.Contains(st.Ring.Members, xid) {
				return fmt.Errorf("node %s's ring still lists X", c.label)
			}
		}
		return nil
	})
	bcancel()
	require.NoError(t, err, "the peers evict the paused node X")
	evicted := time.Now()
	if ev, _, ok := firstLogged(peers, "evicted a node", xid); ok {
		evicted = ev.At
	}

	// The stalled call ends with an unknown outcome: node_left at the
	// eviction, or its deadline; or with the new owner's answer, when the
	// message, which the broker took back from the paused X, was drained
	// to it and ran there before the caller's portal learned of the
	// eviction.
	require.True(t, awaitCall(rpCallTimeout+rpBound), "the stalled StartVm ends by its deadline")
	callText := outcomeOf(call.err)
	switch code := message.CodeOf(call.err); {
	case call.err == nil && call.rep.Node != xid:
		// X's broker connection died with the pause, so the broker took
		// the message back; a survivor drained it to the new owner, which
		// ran it (once X's transaction was ended) and answered the caller
		// before its portal learned of the eviction. A true answer.
		t.Logf("the stalled StartVm was answered by the new owner %s, to which it was drained: %s@%d", call.rep.Node, call.rep.VM.State, call.rep.VM.Version)
		hist.ReturnVM(stalledOp, chaoscheck.VMOutput{State: call.rep.VM.State})
		callText += " from the new owner, the message drained to it"
	case call.err == nil:
		t.Errorf("the stalled StartVm answered %+v: its owner X was paused in it, and its caller should not know whether it ran", call.rep)
		hist.ReturnVM(stalledOp, chaoscheck.VMOutput{State: call.rep.VM.State})
	case code.Retry() == message.RetryUnknown:
		hist.Unknown(stalledOp, deadline.Add(rpWindow))
		callText += ": " + call.err.Error()
	default:
		t.Errorf("the stalled StartVm ended %s, which says it did not run; X's hypervisor ran it: %v", code, call.err)
		hist.Unknown(stalledOp, deadline.Add(rpWindow))
	}
	if call.err != nil || call.rep.Node == xid {
		assert.Contains(t, []string{string(message.ErrNodeLeft.Code), string(message.ErrTimeout.Code)}, outcomeOf(call.err), "the caller's outcome is unknown")
	}

	// X's queues drained into the new owner and deleted: whatever the
	// stalled StartVm's redelivery does there is done before the test's
	// own calls.
	jan := newJanitor(t, broker)
	bctx, bcancel = context.WithTimeout(ctx, rpBound)
	err = pollEvery(bctx, 100*time.Millisecond, func() error {
		states, err := jan.inspectAll(nodeQueues(fc.Prefix(), xid))
		if err == nil && len(existing(states)) > 0 {
			err = fmt.Errorf("%d queues of X left, e.g. %s", len(existing(states)), existing(states)[0])
		}
		return err
	})
	bcancel()
	require.NoError(t, err, "the survivors drain and delete X's queues; their log:\n%s", linesText(drainLines(peers, paused)))
	drained := time.Now()

	// Through the new owner: start, then stop, both acknowledged (a stop
	// first if the stalled StartVm's redelivery started the VM there).
	gctx, gcancel := context.WithTimeout(ctx, rpBound)
	getOp := hist.InvokeVM(1, chaoscheck.VMInput{})
	cur, err := service.Call[api.VmReply](gctx, cl, api.GetVm{UUID: vm})
	gcancel()
	require.NoError(t, err, "GetVm after the takeover")
	hist.ReturnVM(getOp, chaoscheck.VMOutput{State: cur.VM.State})
	owner := cur.Node
	require.NotEqual(t, xid, owner, "a peer owns VM %s now", vm)
	ownerProc := peers[slices.IndexFunc(peers, func(c *child) bool { return c.id == owner })]
	calls := []cloud.VMOp{cloud.VMOpStart, cloud.VMOpStop}
	redelivered := cur.VM.State == cloud.VMRunning
	if redelivered {
		calls = append([]cloud.VMOp{cloud.VMOpStop}, calls...)
	}
	var callTexts []string
	var stopped api.VmReply
	for _, op := range calls {
		msg := map[cloud.VMOp]any{cloud.VMOpStart: api.StartVm{UUID: vm}, cloud.VMOpStop: api.StopVm{UUID: vm}}[op]
		i := hist.InvokeVM(1, chaoscheck.VMInput{Op: op})
		began := time.Now()
		rep, err := service.Call[api.VmReply](ctx, cl, msg, bus.WithTimeout(rpBound))
		require.NoError(t, err, "%s through the new owner is acknowledged; its log:\n%s", op, logTail(ownerProc, paused, 20))
		hist.ReturnVM(i, chaoscheck.VMOutput{State: rep.VM.State})
		require.Equal(t, owner, rep.Node, "%s ran on the new owner", op)
		callTexts = append(callTexts, fmt.Sprintf("%s %s (%s after the eviction, took %s, version %d)", op, rep.VM.State, ms(began.Sub(evicted)), ms(time.Since(began)), rep.VM.Version))
		stopped = rep
	}
	require.Equal(t, cloud.VMStopped, stopped.VM.State)
	acked := stopped.VM.Version
	st, v, err := read(ctx)
	require.NoError(t, err)
	require.Equal(t, cloud.VMStopped, st, "the record says stopped after the acknowledged stop")
	require.Equal(t, acked, v)

	// Resume X once the stalled call's window has passed.
	sleepUntil(ctx, deadline.Add(rpWindow+100*time.Millisecond))
	st, _, err = read(ctx)
	require.NoError(t, err)
	require.Equal(t, cloud.VMStopped, st)
	x.Resume(t)
	resumed := time.Now()

	// X's final write fails and X journals what its hypervisor did, with
	// the version it had read; X rejoins with a new epoch.
	var journaled logLine
	bctx, bcancel = context.WithTimeout(ctx, rpBound)
	err = poll(bctx, func() error {
		ls := x.Proc().logLines("the hypervisor acted but the record did not follow", "vm="+vm)
		if len(ls) == 0 {
			return errors.New("node X has not journaled its StartVm")
		}
		journaled = ls[0]
		return nil
	})
	bcancel()
	require.NoError(t, err, "node X journals the start its record did not follow; its log:\n%s", logTail(x.Proc(), holding.At, 30))
	assert.Contains(t, journaled.Text, "base=1", "the journal entry names the version X's StartVm read")
	failure := "its write failed"
	if ls := x.Proc().logLines("write refused: this node no longer owns the resource", "resource="+vm); len(ls) > 0 {
		failure = "its write was refused as not_owner"
	}

	// The watch: the record stays stopped at the acknowledged version,
	// however often X and its peers sweep; X rejoins and drops its
	// journal entry meanwhile.
	var rejoined time.Duration
	var epoch int64
	watchEnd := resumed.Add(rpWatch)
	for time.Now().Before(watchEnd) && ctx.Err() == nil {
		st, v, err := read(ctx)
		if err != nil {
			t.Logf("read the record: %v", err)
		} else {
			reads = append(reads, string(st)+"@"+strconv.FormatInt(v, 10))
			if st != cloud.VMStopped || v != acked {
				t.Errorf("%s after the resume the record says %s at version %d: the acknowledged stop (version %d) was lost", ms(time.Since(resumed)), st, v, acked)
				break
			}
		}
		if rejoined == 0 {
			if s, err := x.Proc().status(); err == nil && s.Epoch != before.Epoch && s.State == "serving" && fc.Agreed() == nil {
				rejoined, epoch = time.Since(resumed), s.Epoch
			}
		}
		sleepUntil(ctx, time.Now().Add(rpReadEvery))
	}
	ops := hist.Operations()
	res := porcupine.CheckOperationsTimeout(chaoscheck.VM(cloud.VMCreated), ops, time.Minute)
	assert.Equal(t, porcupine.Ok, res, "the VM's history (%d operations) is linearizable against cloud.Transition", len(ops))
	require.NotZero(t, rejoined, "node X rejoins every ring with a new epoch after the resume; its log:\n%s", logTail(x.Proc(), resumed, 30))

	dropped := x.Proc().logLines("vm journal entry dropped: the record changed since it was taken", "vm="+vm)
	require.Len(t, dropped, 1, "node X drops its stale journal entry once; its log:\n%s", linesText(repairLines(x.Proc(), holding.At)))
	for _, attr := range []string{"base=1", "current=" + strconv.FormatInt(acked, 10)} {
		assert.Contains(t, dropped[0].Text, attr, "the drop line names %s", attr)
	}
	for _, c := range fc.Running() {
		assert.Empty(t, c.logLines("vm state repaired from the hypervisor", "vm="+vm), "node %s repairs nothing", c.label)
	}
	xst, err := x.Proc().status()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), xst.VMs.StaleJournal, "node X counts the dropped entry")
	assert.Zero(t, xst.VMs.Journaled, "node X holds no journal entry any more")
	assert.Zero(t, xst.VMs.Repairs)
	assert.GreaterOrEqual(t, xst.VMs.Sweeps, uint64(rpWatch/rpSweep)-2, "several sweeps ran on X during the watch")
	gctx, gcancel = context.WithTimeout(ctx, rpBound)
	got, err = service.Call[api.VmReply](gctx, cl, api.GetVm{UUID: vm})
	gcancel()
	require.NoError(t, err)
	assert.Equal(t, xid, got.Node, "node X owns VM %s again", vm)
	assert.Equal(t, cloud.VMStopped, got.VM.State)

	t.Logf("stall: node %s held StartVm %s from %s (%s after it was sent); paused %s later; the call's deadline %s after it was sent",
		x.Label(), vm[:8], holding.At.Format(clockFormat), ms(holding.At.Sub(sent)), ms(paused.Sub(holding.At)), rpCallTimeout)
	t.Logf("eviction: %s after the pause; the stalled call ended %s after it was sent: %s; X's queues gone %s after the eviction",
		ms(evicted.Sub(paused)), ms(call.at.Sub(sent)), callText, ms(drained.Sub(evicted)))
	if redelivered {
		t.Logf("takeover: the stalled StartVm, drained from X's queue, ran on the new owner %s first", ownerProc.label)
	}
	t.Logf("takeover: the new owner %s's calls: %s", ownerProc.label, strings.Join(callTexts, "; "))
	t.Logf("resume: SIGCONT %s after the pause (%s past the call's deadline); X journaled the start %s after the resume (%s): %s",
		ms(resumed.Sub(paused)), ms(resumed.Sub(deadline)), ms(journaled.At.Sub(resumed)), failure, strings.TrimSpace(journaled.Text))
	t.Logf("rejoin: X back in every ring with epoch %d (was %d) by %s after the resume; it dropped the journal entry %s after the resume: %s",
		epoch, before.Epoch, ms(rejoined), ms(dropped[0].At.Sub(resumed)), strings.TrimSpace(dropped[0].Text))
	t.Logf("watch: %d reads of the record over %s after the resume, all %s; X swept %d times in all, repaired nothing; porcupine on %d operations: %s",
		len(reads), rpWatch, reads[0], xst.VMs.Sweeps, len(ops), res)
	t.Logf("node X's log from the stall on:\n%s", linesText(repairLines(x.Proc(), holding.At)))
	t.Logf("the repair test on %s took %s", t.Name(), since(testStart))
}

// repairWords mark the log lines that tell what a node did about the VM
// whose final write failed.
var repairWords = []string{"test stall", "write refused", "hypervisor acted", "journal entry", "vm state repaired", "evicted", "rejoin", "node serving"}

// repairLines returns the lines c logged since since that tell what it
// did about the stalled VM.
func repairLines(c *child, since time.Time) []logLine {
	return slices.DeleteFunc(c.logLines(), func(l logLine) bool {
		return l.At.Before(since) || !slices.ContainsFunc(repairWords, func(w string) bool { return strings.Contains(l.Text, w) })
	})
}

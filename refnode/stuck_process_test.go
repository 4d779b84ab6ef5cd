package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// The stuck-state test: a StartVm whose final write is lost to a
// database cut leaves the record behind the hypervisor; the owner's
// sweeper repairs it within one sweep interval of the heal.
const (
	// stStall is node X's -test-stall-vm-final-write: its first VM
	// operation holds its transaction this long after its hypervisor
	// call, before its final write.
	stStall = 3 * time.Second
	// stSweep is every node's -vm-sweep.
	stSweep = 2 * time.Second
	// stCutLead is how long before the end of the stall the test cuts X's
	// database link. The cut resets the stalled transaction's connection,
	// so the final write fails on a dead connection. Late in the stall,
	// so that the cut is short: it lasts about stCutLead plus the time
	// the failed StartVm takes to end, well under the lease (2 s: X would
	// stop owning anything) and the eviction threshold (3 s), so X stays
	// the VM's owner and the repair is X's. Not too late: the transaction
	// has then been idle stStall-stCutLead, under PostgreSQL's
	// idle_in_transaction_session_timeout, which refnode sets to
	// -evict-after (3 s), so it is the cut, not the server, that ends it.
	stCutLead = 700 * time.Millisecond
	// stCutBound bounds the cut: the StartVm must have ended by then.
	stCutBound = 1500 * time.Millisecond
	// stRepairMargin is what the repair may take beyond one sweep
	// interval after the heal: the sweep itself and process scheduling
	// on a shared machine (a sweep that failed just before the heal is
	// retried one interval later).
	stRepairMargin = 1500 * time.Millisecond
	// stCallTimeout is the StartVm's deadline.
	stCallTimeout = 15 * time.Second
	// stBound bounds every wait that is not an acceptance figure.
	stBound = 20 * time.Second
)

// TestStuckStateRepaired runs three `refnode serve` processes on RabbitMQ
// and PostgreSQL with the default heartbeat timing (beat 500 ms, lease
// 2 s, evict 3 s) and -vm-sweep 2s, each through its own proxies. Node X
// (slot A) also runs with -test-stall-vm-final-write 3s. The test creates
// a VM that X owns and sends it StartVm; X stalls after its hypervisor
// call (X's simulator now runs the VM) and before its final write; the
// test cuts X's database link shortly before the stall ends, so the
// final write fails and the transaction rolls back: the StartVm ends in
// an error and PostgreSQL, read directly, still records the VM created.
// The test heals the link, about a second after the cut (X is neither
// fenced nor evicted), and requires the record to say running (the
// hypervisor's truth) within one sweep interval of the heal plus a
// margin, X to log "vm state repaired from the hypervisor" for the VM
// (from created to running, power on), and X to own the VM with the
// same epoch throughout.
//
// It prints the figures: when the cut and the heal came relative to the
// stall, how long the cut lasted, and the repair's time after the heal.
func TestStuckStateRepaired(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Runs: "the stuck-state test runs processes for about 10 s", FullSpeed: true, Timeout: 2 * time.Minute})
	testStart := time.Now()
	fc := newFaultCluster(t, ctx, broker, faultOptions{Nodes: 3, Name: "stuck", Flags: []string{"-vm-sweep", stSweep.String()}})
	x := fc.Node(0)
	x.Flags = append(x.Flags, "-test-stall-vm-final-write", stStall.String())
	fc.Start(t, ctx)
	xid := x.ID()
	before, err := x.Proc().status()
	require.NoError(t, err)
	peers := othersThan(fc.Running(), xid)
	t.Logf("3 nodes serving and agreeing %s after the test began: %s; node X is %s, stalling its first VM final write for %s; every node sweeps every %s",
		since(testStart), fc.describe(), x.Label(), stStall, stSweep)

	cl := fc.Client(t, ctx)
	img, err := service.Call[api.ImageReply](ctx, cl, api.AddImage{UUID: message.NewUUID(), Name: "stuck"})
	require.NoError(t, err, "add an image")
	_, err = service.Call[api.HostReply](ctx, cl, api.AddHost{UUID: message.NewUUID(), Address: "10.0.3.1"})
	require.NoError(t, err, "add a host")

	// A VM that X owns: its UUID picked on the ring of the running nodes,
	// and checked by the node GetVm's reply names.
	r := ringOver(t, idsOf(fc.Running()))
	vm := message.NewUUID()
	for mustOwner(t, r, vm) != xid {
		vm = message.NewUUID()
	}
	_, err = service.Call[api.VmCreated](ctx, cl, api.CreateVm{UUID: vm, Name: "stuck", ImageUUID: img.Image.UUID})
	require.NoError(t, err, "create the VM")
	got, err := service.Call[api.VmReply](ctx, cl, api.GetVm{UUID: vm})
	require.NoError(t, err)
	require.Equal(t, xid, got.Node, "node X (%s) owns VM %s", x.Label(), vm)
	require.Equal(t, cloud.VMCreated, got.VM.State)

	// The StartVm that X stalls in. Received whatever happens, so that no
	// goroutine outlives the test.
	type outcome struct {
		rep api.VmReply
		err error
		at  time.Time
	}
	started := make(chan outcome, 1)
	sent := time.Now()
	go func() {
		cctx, cancel := context.WithTimeout(ctx, stCallTimeout)
		defer cancel()
		rep, err := service.Call[api.VmReply](cctx, cl, api.StartVm{UUID: vm}, bus.WithTimeout(stCallTimeout))
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
	defer awaitCall(stCallTimeout)

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

	// Cut X's database link late in the stall, then wait for the stall's
	// end and the StartVm's.
	sleepUntil(ctx, holding.At.Add(stStall-stCutLead))
	x.DB.Cut()
	cut := time.Now()
	defer x.DB.Heal() // if a check below fails during the cut
	require.Less(t, cut.Sub(holding.At), stStall-stCutLead/2, "the test cut X's database link in time, before the end of the stall")
	var over logLine
	bctx, bcancel = context.WithTimeout(ctx, stCutBound)
	err = poll(bctx, func() error {
		ls := x.Proc().logLines("test stall: over", "vm="+vm)
		if len(ls) == 0 {
			return errors.New("node X's stall is not over")
		}
		over = ls[0]
		if !awaitCall(0) {
			return errors.New("the StartVm has not ended")
		}
		return nil
	})
	bcancel()
	require.NoError(t, err, "the stall and the StartVm end within %s of the cut; node X's log:\n%s", stCutBound, logTail(x.Proc(), holding.At, 20))
	require.Error(t, call.err, "the StartVm fails: its final write was cut off; it answered %+v", call.rep)
	state, err := recordedState(ctx, fc, vm)
	require.NoError(t, err)
	require.Equal(t, cloud.VMCreated, state, "the record still says created while the link is cut: the transaction rolled back")

	x.DB.Heal()
	healed := time.Now()
	callText := outcomeOf(call.err) + ": " + call.err.Error()

	// The sweeper repairs the record from the hypervisor's power state.
	bctx, bcancel = context.WithTimeout(ctx, stBound)
	err = poll(bctx, func() error {
		st, err := recordedState(bctx, fc, vm)
		if err == nil && st != cloud.VMRunning {
			err = fmt.Errorf("VM %s is recorded %s", vm, st)
		}
		return err
	})
	bcancel()
	repaired := time.Now()
	require.NoError(t, err, "the record follows the hypervisor after the heal; node X's log:\n%s", logTail(x.Proc(), holding.At, 30))
	took := repaired.Sub(healed)
	assert.LessOrEqual(t, took, stSweep+stRepairMargin,
		"the VM reaches its stable state within one sweep interval (%s) of the heal, plus %s", stSweep, stRepairMargin)

	var repair logLine
	bctx, bcancel = context.WithTimeout(ctx, 5*time.Second)
	err = poll(bctx, func() error { // the log line may trail the commit
		ls := x.Proc().logLines("vm state repaired from the hypervisor", "vm="+vm)
		if len(ls) == 0 {
			return errors.New("node X has not logged the repair")
		}
		repair = ls[0]
		return nil
	})
	bcancel()
	require.NoError(t, err, "node X logs the repair; its log:\n%s", logTail(x.Proc(), holding.At, 30))
	// Each process runs its own simulator (simhv Adopt), which cannot
	// tell another process's changes: its power is unknown, and X repairs
	// from its journal of the hypervisor call it saw succeed.
	for _, attr := range []string{"from=" + string(cloud.VMCreated), "to=" + string(cloud.VMRunning), "power=" + string(cloud.PowerUnknown), "source=journal"} {
		assert.Contains(t, repair.Text, attr, "the repair line names %s", attr)
	}
	if ls := x.Proc().logLines("vm state repaired from the hypervisor", "vm="+vm); len(ls) != 1 {
		t.Errorf("node X repaired VM %s once; it logged:\n%s", vm, linesText(ls))
	}
	for _, c := range peers {
		assert.Empty(t, c.logLines("vm state repaired from the hypervisor", "vm="+vm), "peer %s did not repair X's VM", c.label)
	}

	// X kept the VM throughout: no eviction, the same epoch.
	if ev, by, ok := firstLogged(peers, "evicted a node", xid); ok {
		t.Errorf("no peer evicts X during its short cut; %s did: %s", by.label, ev.Text)
	}
	bctx, bcancel = context.WithTimeout(ctx, stBound)
	require.NoError(t, poll(bctx, fc.Agreed), "the rings agree after the heal")
	bcancel()
	after, err := x.Proc().status()
	require.NoError(t, err)
	assert.Equal(t, before.Epoch, after.Epoch, "node X kept its epoch: it was never evicted")
	got, err = service.Call[api.VmReply](ctx, cl, api.GetVm{UUID: vm})
	require.NoError(t, err)
	assert.Equal(t, xid, got.Node, "node X still owns VM %s", vm)
	assert.Equal(t, cloud.VMRunning, got.VM.State, "GetVm reports the VM running")

	t.Logf("stall: node %s held StartVm %s from %s (%s after it was sent); the stall was over at %s",
		x.Label(), vm[:8], holding.At.Format(clockFormat), ms(holding.At.Sub(sent)), over.At.Format(clockFormat))
	t.Logf("cut: X's database link cut %s into the stall; the StartVm ended %s after the cut: %s",
		ms(cut.Sub(holding.At)), ms(call.at.Sub(cut)), callText)
	t.Logf("heal: %s after the cut (%s into the stall); the record said %s before the heal",
		ms(healed.Sub(cut)), ms(healed.Sub(holding.At)), cloud.VMCreated)
	t.Logf("repair: the record said %s %s after the heal (bound %s + %s); X logged the repair %s after the heal: %s",
		cloud.VMRunning, ms(took), stSweep, stRepairMargin, ms(repair.At.Sub(healed)), strings.TrimSpace(repair.Text))
	t.Logf("node X's log from the stall to the repair:\n%s", linesText(stuckLines(x.Proc(), holding.At, repair.At)))
	t.Logf("the stuck-state test took %s", since(testStart))
}

// recordedState reads VM id's state from the database directly.
func recordedState(ctx context.Context, fc *faultCluster, id string) (cloud.VMState, error) {
	st, _, err := recordedVM(ctx, fc, id)
	return st, err
}

// recordedVM reads VM id's state and version from the database directly.
func recordedVM(ctx context.Context, fc *faultCluster, id string) (cloud.VMState, int64, error) {
	var st string
	var version int64
	tb := fc.tables
	err := tb.db.QueryRowContext(ctx, tb.rebind(`SELECT state, version FROM `+tb.table("refnode_vms")+` WHERE uuid = ?`), id).Scan(&st, &version)
	if err != nil {
		return "", 0, fmt.Errorf("read VM %s's record: %w", id, err)
	}
	return cloud.VMState(st), version, nil
}

// stuckWords mark the log lines that tell what a node did about a VM
// whose final write failed.
var stuckWords = []string{"test stall", "vm sweep", "vm state repaired", `msg="vm `, "lease", "fenc"}

// stuckLines returns the lines c logged from from to to (inclusive) that
// tell what it did about the stuck VM.
func stuckLines(c *child, from, to time.Time) []logLine {
	return slices.DeleteFunc(c.logLines(), func(l logLine) bool {
		return l.At.Before(from) || l.At.After(to) || !slices.ContainsFunc(stuckWords, func(w string) bool { return strings.Contains(l.Text, w) })
	})
}

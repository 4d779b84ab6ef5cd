package chaoscheck_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/refnode/internal/chaoscheck"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service/servicetest/chaos"
)

func vmOp(op cloud.VMOp) chaoscheck.VMInput { return chaoscheck.VMInput{Op: op} }

// vop is a VM history entry written by hand: input, output, call and
// return.
func vop(client int, in chaoscheck.VMInput, out chaoscheck.VMOutput, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
}

var (
	vmRead    = chaoscheck.VMInput{}
	vmUnknown = chaoscheck.VMOutput{Unknown: true}
	vmRefused = chaoscheck.VMOutput{Refused: true}
)

func vmIs(st cloud.VMState) chaoscheck.VMOutput { return chaoscheck.VMOutput{State: st} }

// TestVM checks the VM model on histories written by hand, from a VM
// created: the linearizable ones pass, and each violation is caught,
// issue 23's lost acknowledged write among them.
func TestVM(t *testing.T) {
	start, stop, reboot, destroy := vmOp(cloud.VMOpStart), vmOp(cloud.VMOpStop), vmOp(cloud.VMOpReboot), vmOp(cloud.VMOpDestroy)
	for _, c := range []struct {
		name    string
		history []porcupine.Operation
		legal   bool
	}{
		{"sequential", []porcupine.Operation{
			vop(0, vmRead, vmIs(cloud.VMCreated), 0, 1),
			vop(0, start, vmIs(cloud.VMRunning), 2, 3),
			vop(1, reboot, vmIs(cloud.VMRunning), 4, 5),
			vop(1, stop, vmIs(cloud.VMStopped), 6, 7),
			vop(0, start, vmIs(cloud.VMRunning), 8, 9),
			vop(0, destroy, vmIs(cloud.VMDestroyed), 10, 11),
			vop(1, vmRead, vmIs(cloud.VMDestroyed), 12, 13),
		}, true},
		{"a refusal where the transition is not allowed", []porcupine.Operation{
			vop(0, stop, vmRefused, 0, 1),
			vop(0, start, vmIs(cloud.VMRunning), 2, 3),
			vop(1, reboot, vmIs(cloud.VMRunning), 4, 5),
			vop(1, stop, vmIs(cloud.VMStopped), 6, 7),
			vop(1, reboot, vmRefused, 8, 9),
		}, true},
		{"a refusal of a start of a running VM (it succeeds)", []porcupine.Operation{
			vop(0, start, vmIs(cloud.VMRunning), 0, 1),
			vop(1, start, vmRefused, 2, 3),
		}, false},
		{"a refusal where the transition is allowed", []porcupine.Operation{
			vop(0, start, vmRefused, 0, 1),
		}, false},
		{"a transition from a state it is not allowed from", []porcupine.Operation{
			vop(0, stop, vmIs(cloud.VMStopped), 0, 1),
		}, false},
		{"a reply with another state than the transition's", []porcupine.Operation{
			vop(0, start, vmIs(cloud.VMStopped), 0, 1),
		}, false},
		{"a read of a state nothing put there", []porcupine.Operation{
			vop(0, start, vmIs(cloud.VMRunning), 0, 1),
			vop(1, vmRead, vmIs(cloud.VMStopped), 2, 3),
		}, false},
		{"two starts at once: both succeed", []porcupine.Operation{
			vop(0, start, vmIs(cloud.VMRunning), 0, 5),
			vop(1, start, vmIs(cloud.VMRunning), 1, 4),
		}, true},
		{"a stop of a stopped VM succeeds", []porcupine.Operation{
			vop(0, start, vmIs(cloud.VMRunning), 0, 1),
			vop(0, stop, vmIs(cloud.VMStopped), 2, 3),
			vop(1, stop, vmIs(cloud.VMStopped), 4, 5),
		}, true},
		{"an unknown start that did not take effect", []porcupine.Operation{
			vop(0, start, vmUnknown, 0, 5),
			vop(1, vmRead, vmIs(cloud.VMCreated), 6, 7),
		}, true},
		{"an unknown start that took effect", []porcupine.Operation{
			vop(0, start, vmUnknown, 0, 5),
			vop(1, vmRead, vmIs(cloud.VMRunning), 6, 7),
		}, true},
		{"an unknown stop of a VM it cannot stop", []porcupine.Operation{
			vop(0, stop, vmUnknown, 0, 5),
			vop(1, vmRead, vmIs(cloud.VMStopped), 6, 7),
		}, false},
		{"an unknown read constrains nothing", []porcupine.Operation{
			vop(0, vmRead, vmUnknown, 0, 1),
		}, true},
		// Issue 23: node C's start ends node_left (unknown, allowed to
		// take effect until 2 s past its deadline: 10); the new owner's
		// start and stop are acknowledged, a read shows stopped after
		// the window; C's stale repair then makes the record say running.
		{"the new owner's start and stop after the stalled start; the record stays stopped", []porcupine.Operation{
			vop(0, start, vmUnknown, 0, 10),
			vop(1, start, vmIs(cloud.VMRunning), 3, 4),
			vop(1, stop, vmIs(cloud.VMStopped), 5, 6),
			vop(2, vmRead, vmIs(cloud.VMStopped), 11, 12),
			vop(2, vmRead, vmIs(cloud.VMStopped), 20, 21),
		}, true},
		{"issue 23: the stalled start repaired after the acknowledged stop", []porcupine.Operation{
			vop(0, start, vmUnknown, 0, 10),
			vop(1, start, vmIs(cloud.VMRunning), 3, 4),
			vop(1, stop, vmIs(cloud.VMStopped), 5, 6),
			vop(2, vmRead, vmIs(cloud.VMStopped), 11, 12),
			vop(2, vmRead, vmIs(cloud.VMRunning), 20, 21),
		}, false},
		{"the stalled start taking effect within its window is legal", []porcupine.Operation{
			vop(0, start, vmUnknown, 0, 10),
			vop(1, start, vmIs(cloud.VMRunning), 3, 4),
			vop(1, stop, vmIs(cloud.VMStopped), 5, 6),
			vop(2, vmRead, vmIs(cloud.VMRunning), 7, 8),
		}, true},
		{"an operation of no kind", []porcupine.Operation{
			vop(0, vmOp("warp"), vmIs(cloud.VMRunning), 0, 1),
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := map[bool]porcupine.CheckResult{true: porcupine.Ok, false: porcupine.Illegal}[c.legal]
			res := porcupine.CheckOperationsTimeout(chaoscheck.VM(cloud.VMCreated), c.history, 10*time.Second)
			assert.Equal(t, want, res, "VM: linearizable: %t", c.legal)
			res = porcupine.CheckOperationsTimeout(chaoscheck.VMModel(cloud.VMCreated), asResults(c.history), 10*time.Second)
			assert.Equal(t, want, res, "VMModel: linearizable: %t", c.legal)
		})
	}
}

// asResults turns a history of VMOutputs into one for [chaoscheck.VMModel]:
// each Output a chaos.Result, unknown or with the VMOutput as its Value.
func asResults(h []porcupine.Operation) []porcupine.Operation {
	out := make([]porcupine.Operation, len(h))
	for i, o := range h {
		out[i] = o
		if v := o.Output.(chaoscheck.VMOutput); v.Unknown {
			out[i].Output = chaos.Result{Unknown: true}
		} else {
			out[i].Output = chaos.Result{Value: v}
		}
	}
	return out
}

func TestVMInit(t *testing.T) {
	h := []porcupine.Operation{vop(0, vmOp(cloud.VMOpStart), vmIs(cloud.VMRunning), 0, 1)}
	assert.True(t, porcupine.CheckOperations(chaoscheck.VM(cloud.VMStopped), h))
	assert.False(t, porcupine.CheckOperations(chaoscheck.VM(cloud.VMDestroyed), h))
	assert.True(t, porcupine.CheckOperations(chaoscheck.VMModel(cloud.VMStopped), asResults(h)))
	assert.False(t, porcupine.CheckOperations(chaoscheck.VMModel(cloud.VMDestroyed), asResults(h)))
}

func TestDescribeVM(t *testing.T) {
	m := chaoscheck.VM(cloud.VMCreated)
	assert.Equal(t, "start() -> running", m.DescribeOperation(vmOp(cloud.VMOpStart), vmIs(cloud.VMRunning)))
	assert.Equal(t, "stop() -> refused", m.DescribeOperation(vmOp(cloud.VMOpStop), vmRefused))
	assert.Equal(t, "read() -> stopped", m.DescribeOperation(vmRead, vmIs(cloud.VMStopped)))
	assert.Equal(t, "start() -> unknown", m.DescribeOperation(vmOp(cloud.VMOpStart), vmUnknown))

	m = chaoscheck.VMModel(cloud.VMCreated) // the kit's "input -> output", with VMInput's and VMOutput's String
	assert.Equal(t, "start() -> running", m.DescribeOperation(vmOp(cloud.VMOpStart), chaos.Result{Value: vmIs(cloud.VMRunning)}))
	assert.Equal(t, "stop() -> refused", m.DescribeOperation(vmOp(cloud.VMOpStop), chaos.Result{Value: vmRefused}))
	assert.Equal(t, "read() -> stopped", m.DescribeOperation(vmRead, chaos.Result{Value: vmIs(cloud.VMStopped)}))
	assert.Equal(t, "start() -> unknown", m.DescribeOperation(vmOp(cloud.VMOpStart), chaos.Result{Unknown: true}))
}

// TestRecorderVM records a VM's history: an unknown start ends at its
// deadline, a pending one is unknown until the end, and the outputs are
// VMOutputs.
func TestRecorderVM(t *testing.T) {
	c := &clock{t: time.Unix(100, 0)}
	r := chaoscheck.NewRecorder(c.now)
	stalled := r.InvokeVM(0, vmOp(cloud.VMOpStart))
	r.Unknown(stalled, c.t.Add(2*time.Second))
	c.t = c.t.Add(time.Second)
	s := r.InvokeVM(1, vmOp(cloud.VMOpStart))
	r.ReturnVM(s, chaoscheck.VMOutput{State: cloud.VMRunning, Unknown: true}) // ReturnVM means known
	p := r.InvokeVM(1, vmOp(cloud.VMOpStop))
	r.ReturnVM(p, vmIs(cloud.VMStopped))
	refused := r.InvokeVM(1, vmOp(cloud.VMOpReboot))
	r.Fail(refused)
	c.t = c.t.Add(2 * time.Second) // past the stalled start's deadline
	rd := r.InvokeVM(2, vmRead)
	r.ReturnVM(rd, vmIs(cloud.VMStopped))
	r.InvokeVM(2, vmOp(cloud.VMOpDestroy)) // never ends

	ops := r.Operations()
	require.Len(t, ops, 5, "the failed operation is left out")
	assert.Equal(t, vmUnknown, ops[0].Output)
	assert.Equal(t, vmIs(cloud.VMRunning), ops[1].Output)
	assert.Less(t, ops[0].Return, ops[3].Call, "the unknown start ends at its deadline, before the read")
	assert.Equal(t, vmUnknown, ops[4].Output, "an operation that never ended is unknown")
	assert.True(t, porcupine.CheckOperations(chaoscheck.VM(cloud.VMCreated), ops))

	r.ReturnVM(r.InvokeVM(2, vmRead), vmIs(cloud.VMRunning)) // the stalled start repaired after the read of stopped
	assert.False(t, porcupine.CheckOperations(chaoscheck.VM(cloud.VMCreated), r.Operations()),
		"a destroy still pending could not have made it running")
}

// TestVMModelChecked records a VM's history with the kit's recorder, as
// refnode's in-memory repair test does, and checks it with chaos.Check:
// an unknown start may take effect up to its deadline, a refused
// operation is left out; a repair of the stalled start after a read of
// stopped is caught and named.
func TestVMModelChecked(t *testing.T) {
	c := &clock{t: time.Unix(100, 0)}
	r := chaos.NewRecorder(c.now)
	const vm = "vm-1"
	stalled := r.Invoke(0, vm, vmOp(cloud.VMOpStart))
	r.Unknown(stalled, c.t.Add(2*time.Second))
	c.t = c.t.Add(time.Second)
	r.Return(r.Invoke(1, vm, vmOp(cloud.VMOpStart)), vmIs(cloud.VMRunning))
	r.Return(r.Invoke(1, vm, vmOp(cloud.VMOpStop)), vmIs(cloud.VMStopped))
	r.Return(r.Invoke(1, vm, vmOp(cloud.VMOpReboot)), vmRefused)
	r.Fail(r.Invoke(1, vm, vmOp(cloud.VMOpReboot)))
	c.t = c.t.Add(2 * time.Second) // past the stalled start's deadline
	r.Return(r.Invoke(2, vm, vmRead), vmIs(cloud.VMStopped))

	rep, err := chaos.Check(chaoscheck.VMModel(cloud.VMCreated), r, 10*time.Second, "")
	require.NoError(t, err)
	assert.True(t, rep.OK(), "%s", rep)
	assert.Equal(t, 5, rep.Operations, "the failed operation is left out")

	r.Return(r.Invoke(2, vm, vmRead), vmIs(cloud.VMRunning)) // the stalled start repaired after the read of stopped
	rep, err = chaos.Check(chaoscheck.VMModel(cloud.VMCreated), r, 10*time.Second, "")
	require.NoError(t, err)
	require.Len(t, rep.Illegal, 1, "%s", rep)
	assert.Equal(t, vm, rep.Illegal[0].Key)
	assert.Contains(t, rep.String(), "read() -> running")
}

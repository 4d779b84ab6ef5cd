package chaoscheck

import (
	"hash/maphash"

	"github.com/anishathalye/porcupine"

	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service/servicetest/chaos"
)

// VMInput is an operation on one VM as a client invoked it.
type VMInput struct {
	// Op is the operation (StartVm, StopVm, RebootVm, DestroyVm), or ""
	// for a read (GetVm, or the record read from the database).
	Op cloud.VMOp
}

// VMOutput is what an operation on a VM returned.
type VMOutput struct {
	// State is the VM's state in the reply: after the operation, or as
	// read.
	State cloud.VMState
	// Refused is set when the operation was refused as not allowed from
	// the VM's state (conflict, naming the states it is allowed
	// from): it did not take effect, and the VM was in such a state.
	Refused bool
	// Unknown is set when the outcome is unknown: the operation may or
	// may not have taken effect, and State means nothing.
	Unknown bool
}

// VM returns the sequential specification of one VM whose record is in
// state init at first, for porcupine's checkers: operations with a
// [VMInput] and a [VMOutput], following refnode's state machine
// (cloud.Transition). An operation that returned took its VM from a
// state it is allowed from to the state it ends in, which its reply
// shows; a refused one found the VM in a state it is not allowed from; a
// read returns the state; an operation whose outcome is unknown may or
// may not take effect (if allowed), and a read with an unknown outcome
// constrains nothing. The model is safe for concurrent use.
//
// With [Recorder.Unknown]'s deadline, this catches a lost acknowledged
// write: a record that, after a stop was acknowledged and read back,
// says running again with no operation that could have started it in
// time is not linearizable.
func VM(init cloud.VMState) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{init} },
		Step: func(state, input, output any) []any {
			return vmStep(state.(cloud.VMState), input.(VMInput), output.(VMOutput))
		},
		Equal: func(a, b any) bool { return a.(cloud.VMState) == b.(cloud.VMState) },
		Hash:  func(s any) uint64 { return maphash.String(seed, string(s.(cloud.VMState))) },
		DescribeOperation: func(input, output any) string {
			return describeVM(input.(VMInput), output.(VMOutput))
		},
		DescribeState: func(state any) string { return string(state.(cloud.VMState)) },
	}
	return nm.ToModel()
}

// VMModel is [VM] for the SDK's chaos kit: the model, built with
// [chaos.Model], of one VM whose record is in state init at first, for
// [chaos.Check] on the histories of a [chaos.Recorder]. Their Inputs are
// [VMInput]s, and the Value of a [chaos.Result] is a [VMOutput] with
// Unknown unset (the Result says whether the outcome is unknown): the
// VM's state after an operation that took effect or as read, or only
// Refused (State empty) for an operation refused as not allowed from the
// VM's state. It follows cloud.Transition as [VM] does; the model is
// safe for concurrent use.
func VMModel(init cloud.VMState) porcupine.Model {
	return chaos.Model(init, vmNext)
}

// vmNext is the VM's sequential behaviour: the state in leads to from s,
// and what it returns.
func vmNext(s cloud.VMState, in VMInput) (cloud.VMState, VMOutput) {
	if in.Op == "" {
		return s, VMOutput{State: s}
	}
	_, after, err := cloud.Transition(s, in.Op)
	if err != nil {
		return s, VMOutput{Refused: true}
	}
	return after, VMOutput{State: after}
}

// vmStep returns every state the VM may be in after in returned out from
// state s; none if it cannot have. A refused operation's out.State, and
// an unknown one's, mean nothing.
func vmStep(s cloud.VMState, in VMInput, out VMOutput) []any {
	next, want := vmNext(s, in)
	switch {
	case out.Unknown && next == s:
		return []any{s}
	case out.Unknown:
		return []any{s, next} // taken effect or not
	case in.Op == "":
		if out.State == s {
			return []any{s}
		}
	case out.Refused && want.Refused:
		return []any{s}
	case !out.Refused && !want.Refused && out.State == want.State:
		return []any{next}
	}
	return nil
}

// String describes in as "start()", "stop()" and so on, or "read()".
func (in VMInput) String() string {
	if in.Op == "" {
		return "read()"
	}
	return string(in.Op) + "()"
}

// String describes out as the VM's state, "refused" or "unknown".
func (out VMOutput) String() string {
	switch {
	case out.Unknown:
		return "unknown"
	case out.Refused:
		return "refused"
	}
	return string(out.State)
}

func describeVM(in VMInput, out VMOutput) string {
	return in.String() + " -> " + out.String()
}

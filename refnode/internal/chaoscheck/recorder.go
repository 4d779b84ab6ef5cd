package chaoscheck

import (
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cloudbus-go/cloudbus/service/servicetest/chaos"
)

// Recorder records the operations of concurrent clients on one register
// or one VM: each invocation, and how and when it ended. It is the SDK's
// chaos.Recorder (package service/servicetest/chaos) on one resource,
// with this package's outputs: an unknown outcome is an Output (or
// VMOutput) with Unknown set. It is safe for concurrent use; the usual
// client does
//
//	op := rec.Invoke(client, chaoscheck.Input{Kind: chaoscheck.Write, Value: v})
//	err := call(ctx) // deadline: the ctx's
//	switch {
//	case err == nil:          rec.Return(op, chaoscheck.Output{})
//	case nothing happened:    rec.Fail(op)
//	default:                  rec.Unknown(op, deadline)
//	}
//
// and the test checks porcupine.CheckOperations(Register(init),
// rec.Operations()). A history of one VM is recorded the same way with
// [Recorder.InvokeVM] and [Recorder.ReturnVM], and checked with [VM]; a
// Recorder holds the operations of one model only.
type Recorder struct {
	rec *chaos.Recorder
}

// Op identifies an operation of a [Recorder], from [Recorder.Invoke].
type Op = chaos.Op

// NewRecorder returns an empty recorder that stamps events with now
// (time.Now if nil; inside a testing/synctest bubble, the bubble's
// clock).
func NewRecorder(now func() time.Time) *Recorder {
	return &Recorder{rec: chaos.NewRecorder(now)}
}

// Invoke records that client (a small number, 0 for the first) invokes
// in now, and returns the operation, to end with Return, Unknown or Fail.
// Call it just before sending the request.
func (r *Recorder) Invoke(client int, in Input) Op { return r.rec.Invoke(client, "", in) }

// InvokeVM is [Recorder.Invoke] for an operation on a VM ([VM]).
func (r *Recorder) InvokeVM(client int, in VMInput) Op { return r.rec.Invoke(client, "", in) }

// Return records that op returned out now, a reply saying what happened.
// Call it just after the reply arrived.
func (r *Recorder) Return(op Op, out Output) {
	out.Unknown = false
	r.rec.Return(op, out)
}

// ReturnVM is [Recorder.Return] for an operation on a VM: the reply said
// what happened (out.Unknown is ignored).
func (r *Recorder) ReturnVM(op Op, out VMOutput) {
	out.Unknown = false
	r.rec.Return(op, out)
}

// Unknown records that op ended without saying whether it took effect
// (a timeout, node_left, internal): the check lets it take effect at any
// instant from its invocation up to deadline, the latest instant its
// caller allowed it to run, or never.
func (r *Recorder) Unknown(op Op, deadline time.Time) { r.rec.Unknown(op, deadline) }

// Fail records that op did not take effect (refused before it ran):
// it is left out of the history.
func (r *Recorder) Fail(op Op) { r.rec.Fail(op) }

// Operations returns the history for porcupine: one operation per
// invocation, but those recorded with Fail, with Input and Output values
// (VMInput and VMOutput for a VM's; Unknown set for an unknown outcome)
// and times that order the events as recorded. An operation that has not
// ended is taken as unknown with no deadline. The caller owns the slice.
func (r *Recorder) Operations() []porcupine.Operation {
	ops := r.rec.Operations("")
	for i, o := range ops {
		res := o.Output.(chaos.Result)
		switch {
		case !res.Unknown:
			ops[i].Output = res.Value
		case isVM(o.Input):
			ops[i].Output = VMOutput{Unknown: true}
		default:
			ops[i].Output = Output{Unknown: true}
		}
	}
	return ops
}

func isVM(in any) bool {
	_, ok := in.(VMInput)
	return ok
}

// Len returns the number of operations invoked so far.
func (r *Recorder) Len() int { return r.rec.Len() }

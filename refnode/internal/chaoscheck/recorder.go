package chaoscheck

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Recorder records the operations of concurrent clients on one register
// or one VM: each invocation, and how and when it ended. It is safe for
// concurrent use; the usual client does
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
	now func() time.Time

	mu  sync.Mutex
	seq int64 // events recorded so far
	ops []record
}

// Op identifies an operation of a [Recorder], from [Recorder.Invoke].
type Op int

// stamp places an event: its time, then its order among the events.
type stamp struct {
	at  time.Time
	seq int64 // afterAll: after every event at this time
}

const afterAll = math.MaxInt64

func (a stamp) compare(b stamp) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

type outcome int

const (
	pending outcome = iota
	returned
	unknown
	failed
)

type record struct {
	client    int
	in, out   any // Input and Output, or VMInput and VMOutput
	call, ret stamp
	outcome   outcome
}

// unknownOf is the output of an operation with input in whose outcome
// is unknown.
func unknownOf(in any) any {
	if _, ok := in.(VMInput); ok {
		return VMOutput{Unknown: true}
	}
	return Output{Unknown: true}
}

// NewRecorder returns an empty recorder that stamps events with now
// (time.Now if nil; inside a testing/synctest bubble, the bubble's
// clock).
func NewRecorder(now func() time.Time) *Recorder {
	if now == nil {
		now = time.Now
	}
	return &Recorder{now: now}
}

// stampLocked stamps an event happening now; r.mu is held.
func (r *Recorder) stampLocked() stamp {
	r.seq++
	return stamp{at: r.now(), seq: r.seq}
}

// Invoke records that client (a small number, 0 for the first) invokes
// in now, and returns the operation, to end with Return, Unknown or Fail.
// Call it just before sending the request.
func (r *Recorder) Invoke(client int, in Input) Op { return r.invoke(client, in) }

// InvokeVM is [Recorder.Invoke] for an operation on a VM ([VM]).
func (r *Recorder) InvokeVM(client int, in VMInput) Op { return r.invoke(client, in) }

func (r *Recorder) invoke(client int, in any) Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, record{client: client, in: in, call: r.stampLocked()})
	return Op(len(r.ops) - 1)
}

// end records how op ended; it panics if op is unknown or ended before.
func (r *Recorder) end(op Op, o outcome, out func(in any) any, ret stamp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if op < 0 || int(op) >= len(r.ops) || r.ops[op].outcome != pending {
		panic(fmt.Sprintf("chaoscheck: operation %d was not invoked or has ended", op))
	}
	rec := &r.ops[op]
	if ret.seq == 0 {
		ret = r.stampLocked()
	}
	if ret.compare(rec.call) < 0 {
		ret = rec.call
	}
	rec.outcome, rec.out, rec.ret = o, out(rec.in), ret
}

// Return records that op returned out now, a reply saying what happened.
// Call it just after the reply arrived.
func (r *Recorder) Return(op Op, out Output) {
	out.Unknown = false
	r.end(op, returned, func(any) any { return out }, stamp{})
}

// ReturnVM is [Recorder.Return] for an operation on a VM: the reply said
// what happened (out.Unknown is ignored).
func (r *Recorder) ReturnVM(op Op, out VMOutput) {
	out.Unknown = false
	r.end(op, returned, func(any) any { return out }, stamp{})
}

// Unknown records that op ended without saying whether it took effect
// (a timeout, node_left, internal): the check lets it take effect at any
// instant from its invocation up to deadline, the latest instant its
// caller allowed it to run, or never.
func (r *Recorder) Unknown(op Op, deadline time.Time) {
	r.end(op, unknown, unknownOf, stamp{at: deadline, seq: afterAll})
}

// Fail records that op did not take effect (refused before it ran):
// it is left out of the history.
func (r *Recorder) Fail(op Op) { r.end(op, failed, func(any) any { return nil }, stamp{}) }

// Operations returns the history for porcupine: one operation per
// invocation, but those recorded with Fail, with Input and Output values
// (VMInput and VMOutput for a VM's) and times that order the events as recorded. An operation that has not
// ended is taken as unknown with no deadline. The caller owns the slice.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var stamps []stamp
	for _, rec := range r.ops {
		switch rec.outcome {
		case pending:
			stamps = append(stamps, rec.call)
		case returned, unknown:
			stamps = append(stamps, rec.call, rec.ret)
		}
	}
	slices.SortFunc(stamps, stamp.compare)
	rank := func(s stamp) int64 {
		i, _ := slices.BinarySearchFunc(stamps, s, stamp.compare)
		return int64(i)
	}
	var out []porcupine.Operation
	for _, rec := range r.ops {
		op := porcupine.Operation{ClientId: rec.client, Input: rec.in, Output: rec.out}
		switch rec.outcome {
		case failed:
			continue
		case pending:
			op.Output = unknownOf(rec.in)
			op.Call, op.Return = rank(rec.call), int64(len(stamps))
		default:
			op.Call, op.Return = rank(rec.call), rank(rec.ret)
		}
		out = append(out, op)
	}
	return out
}

// Len returns the number of operations invoked so far.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cloudbus-go/cloudbus/message"
)

// Outcome is how a call ended.
type Outcome int

// The outcomes of a call.
const (
	// Pending: it has not ended yet.
	Pending Outcome = iota
	// OK: the reply said what happened.
	OK
	// Failed: it did not run (a coded error of class message.RetrySafe
	// or RetryNever); left out of the history.
	Failed
	// Unknown: it may or may not have run, up to its deadline.
	Unknown
)

// String returns "pending", "ok", "failed", "unknown", or "Outcome(n)".
func (o Outcome) String() string {
	switch o {
	case Pending:
		return "pending"
	case OK:
		return "ok"
	case Failed:
		return "failed"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is an operation's output in the histories [Recorder.Operations]
// returns, the Output a [Model]'s porcupine model steps on.
type Result struct {
	// Value is the output the reply carried (nil when Unknown).
	Value any
	// Unknown is set when the outcome is unknown.
	Unknown bool
}

// Recorder records the operations of concurrent clients on many
// resources: each invocation, and how and when it ended. It is safe for
// concurrent use. A client does
//
//	op := rec.Invoke(client, key, input)
//	out, err := call(ctx) // ctx carries the call's deadline
//	rec.End(op, out, err, deadline)
//
// and the test checks the histories with [Check].
type Recorder struct {
	now func() time.Time

	mu      sync.Mutex
	seq     int64 // events recorded so far
	ops     []record
	byID    map[string]Op // each operation's message id
	commits []commit      // from Commit, in the order recorded
}

// Op identifies an operation of a [Recorder], from [Recorder.Invoke].
type Op int

// stamp places an event: its time, then its order among the events at
// that time (usual in a synctest bubble, where the clock stands still
// while goroutines run).
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

type record struct {
	client    int
	key       string
	id        string // its message id (ID)
	in, out   any
	call, ret stamp
	outcome   Outcome
	deadline  time.Time // End's; zero if ended otherwise
	ended     time.Time // when its end was recorded
}

// NewRecorder returns an empty recorder that stamps events with now
// (time.Now if nil, which inside a testing/synctest bubble is the
// bubble's clock).
func NewRecorder(now func() time.Time) *Recorder {
	if now == nil {
		now = time.Now
	}
	return &Recorder{now: now}
}

func (r *Recorder) stampLocked() stamp {
	r.seq++
	return stamp{at: r.now(), seq: r.seq}
}

// Invoke records that client (a small number, 0 for the first) invokes
// in on the resource key now, and returns the operation, to end with
// [Recorder.End] (or Return, Unknown, Fail). Call it just before sending
// the request.
func (r *Recorder) Invoke(client int, key string, in any) Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := message.NewUUID()
	r.ops = append(r.ops, record{client: client, key: key, id: id, in: in, call: r.stampLocked()})
	op := Op(len(r.ops) - 1)
	if r.byID == nil {
		r.byID = map[string]Op{}
	}
	r.byID[id] = op
	return op
}

// ID returns op's message id, a fresh UUID: send op's message with
// bus.WithID(rec.ID(op)), and retry it under the same id, so that the
// commits [Recorder.Commit] records name the operation they ran.
func (r *Recorder) ID(op Op) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if op < 0 || int(op) >= len(r.ops) {
		panic(fmt.Sprintf("chaos: operation %d was not invoked", op))
	}
	return r.ops[op].id
}

// End records how op ended, from the call's result, at the instant it
// is called: call it where the call returns, in the goroutine that made
// it. It sorts the result so: ok if err is nil, with out as its output;
// failed if err is a coded error saying nothing ran (message.RetrySafe
// or RetryNever); unknown otherwise, taking effect at any instant up to
// deadline, the latest its caller allowed it to run, or never. It
// returns the outcome recorded.
//
// End also keeps deadline, for [Recorder.Overdue].
func (r *Recorder) End(op Op, out any, err error, deadline time.Time) Outcome {
	switch {
	case err == nil:
		r.end(op, OK, out, stamp{}, deadline)
		return OK
	case failedClass(err):
		r.end(op, Failed, nil, stamp{}, deadline)
		return Failed
	default:
		r.end(op, Unknown, nil, stamp{at: deadline, seq: afterAll}, deadline)
		return Unknown
	}
}

// Overdue returns how many operations ended through [Recorder.End] more
// than grace after their deadline: calls whose caller did not learn
// their outcome by its deadline. A call through cloudbus returns by its
// context's deadline; inside a testing/synctest bubble, at that very
// instant (grace 0); in real time, a few milliseconds later.
func (r *Recorder) Overdue(grace time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.ops {
		if !rec.deadline.IsZero() && rec.ended.Sub(rec.deadline) > grace {
			n++
		}
	}
	return n
}

// failedClass reports whether err says the operation did not run.
func failedClass(err error) bool {
	e := message.AsError(err)
	if e == nil {
		return false
	}
	switch e.Retry() {
	case message.RetrySafe, message.RetryNever:
		return true
	}
	return false
}

// end records how op ended; it panics if op is unknown or ended before.
func (r *Recorder) end(op Op, o Outcome, out any, ret stamp, deadline time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if op < 0 || int(op) >= len(r.ops) || r.ops[op].outcome != Pending {
		panic(fmt.Sprintf("chaos: operation %d was not invoked or has ended", op))
	}
	rec := &r.ops[op]
	rec.deadline, rec.ended = deadline, r.now()
	if ret.seq == 0 {
		ret = r.stampLocked()
	}
	if ret.compare(rec.call) < 0 {
		ret = rec.call
	}
	rec.outcome, rec.out, rec.ret = o, out, ret
}

// Return records that op returned out now: the reply said what happened.
func (r *Recorder) Return(op Op, out any) { r.end(op, OK, out, stamp{}, time.Time{}) }

// Unknown records that op ended without saying whether it took effect:
// the check lets it take effect at any instant from its invocation up to
// deadline, or never.
func (r *Recorder) Unknown(op Op, deadline time.Time) {
	r.end(op, Unknown, nil, stamp{at: deadline, seq: afterAll}, time.Time{})
}

// Fail records that op did not take effect; it is left out of the
// history.
func (r *Recorder) Fail(op Op) { r.end(op, Failed, nil, stamp{}, time.Time{}) }

// Keys returns the resources operated on, sorted.
func (r *Recorder) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := map[string]bool{}
	for _, rec := range r.ops {
		keys[rec.key] = true
	}
	return slices.Sorted(maps.Keys(keys))
}

// Counts returns how many operations ended each way.
func (r *Recorder) Counts() map[Outcome]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[Outcome]int{}
	for _, rec := range r.ops {
		out[rec.outcome]++
	}
	return out
}

// Len returns the number of operations invoked so far.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Operations returns key's history for porcupine: one operation per
// invocation on key, but those that failed, with the Input as invoked
// and a [Result] as Output, and times that order the events as recorded.
// An operation that has not ended is taken as unknown with no deadline.
// The caller owns the slice.
func (r *Recorder) Operations(key string) []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var stamps []stamp
	for _, rec := range r.ops {
		if rec.key != key {
			continue
		}
		switch rec.outcome {
		case Pending:
			stamps = append(stamps, rec.call)
		case OK, Unknown:
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
		if rec.key != key || rec.outcome == Failed {
			continue
		}
		op := porcupine.Operation{ClientId: rec.client, Input: rec.in}
		switch rec.outcome {
		case Pending:
			op.Output = Result{Unknown: true}
			op.Call, op.Return = rank(rec.call), int64(len(stamps))
		case Unknown:
			op.Output = Result{Unknown: true}
			op.Call, op.Return = rank(rec.call), rank(rec.ret)
		default:
			op.Output = Result{Value: rec.out}
			op.Call, op.Return = rank(rec.call), rank(rec.ret)
		}
		out = append(out, op)
	}
	return out
}

package chaoscheck_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/refnode/internal/chaoscheck"
)

// clock is a settable clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// TestRecorderOrder: events at one instant keep the order they were
// recorded in; an unknown operation ends after every event at its
// deadline and before any later one; failed operations are left out; an
// operation that never ended is unknown until the end.
func TestRecorderOrder(t *testing.T) {
	c := &clock{t: time.Unix(100, 0)}
	r := chaoscheck.NewRecorder(c.now)
	w := r.Invoke(0, write("a"))
	r.Return(w, chaoscheck.Output{Value: "ignored", Unknown: true}) // Return means known
	rd := r.Invoke(1, read())                                       // same instant, after the write returned
	r.Return(rd, got("a"))
	lost := r.Invoke(2, write("b"))
	r.Unknown(lost, c.t.Add(time.Second))
	refused := r.Invoke(0, write("c"))
	r.Fail(refused)
	c.t = c.t.Add(time.Second) // the deadline
	atDeadline := r.Invoke(1, read())
	r.Return(atDeadline, got("b"))
	c.t = c.t.Add(time.Millisecond)
	later := r.Invoke(0, read())
	r.Invoke(1, write("d")) // never ends
	r.Return(later, got("b"))
	assert.Equal(t, 7, r.Len())

	ops := r.Operations()
	require.Len(t, ops, 6, "the failed operation is left out")
	wOp, rdOp, lostOp, dlOp, laterOp, hangingOp := ops[0], ops[1], ops[2], ops[3], ops[4], ops[5]
	assert.Less(t, wOp.Call, wOp.Return)
	assert.Equal(t, chaoscheck.Output{Value: "ignored"}, wOp.Output, "Return records a known outcome")
	assert.Less(t, wOp.Return, rdOp.Call, "at one instant, the order of recording")
	assert.Equal(t, chaoscheck.Output{Unknown: true}, lostOp.Output)
	assert.Greater(t, lostOp.Return, dlOp.Return, "an unknown operation ends after every event at its deadline")
	assert.Less(t, lostOp.Return, laterOp.Call, "and before every later event")
	assert.Equal(t, write("d"), hangingOp.Input)
	assert.Equal(t, chaoscheck.Output{Unknown: true}, hangingOp.Output, "an operation that never ended is unknown")
	for _, o := range ops {
		assert.LessOrEqual(t, o.Return, hangingOp.Return, "and ends after everything")
	}
	assert.True(t, porcupine.CheckOperations(chaoscheck.Register(""), ops), "the recorded history is linearizable")

	assert.Panics(t, func() { r.Return(w, ok) }, "an operation ends once")
	assert.Panics(t, func() { r.Fail(chaoscheck.Op(99)) }, "an operation that was not invoked")
}

// TestRecorderCatchesStaleRead: a history recorded as a client sees it,
// with a read of a value overwritten before it began, fails the check.
func TestRecorderCatchesStaleRead(t *testing.T) {
	c := &clock{t: time.Unix(100, 0)}
	r := chaoscheck.NewRecorder(c.now)
	for _, v := range []string{"a", "b"} {
		op := r.Invoke(0, write(v))
		r.Return(op, ok)
	}
	op := r.Invoke(1, read())
	r.Return(op, got("a"))
	assert.Equal(t, porcupine.Illegal, porcupine.CheckOperationsTimeout(chaoscheck.Register(""), r.Operations(), 10*time.Second))
}

// TestRecorderLateExecution: a write whose caller timed out, seen by a
// read after a later write returned, is a late execution.
func TestRecorderLateExecution(t *testing.T) {
	c := &clock{t: time.Unix(100, 0)}
	r := chaoscheck.NewRecorder(c.now)
	timedOut := r.Invoke(0, write("a"))
	r.Unknown(timedOut, c.t.Add(time.Second))
	c.t = c.t.Add(2 * time.Second)
	op := r.Invoke(1, write("b"))
	r.Return(op, ok)
	op = r.Invoke(1, read())
	r.Return(op, got("a"))
	assert.Equal(t, porcupine.Illegal, porcupine.CheckOperationsTimeout(chaoscheck.Register(""), r.Operations(), 10*time.Second))
}

func TestRecorderDefaultClock(t *testing.T) {
	r := chaoscheck.NewRecorder(nil)
	op := r.Invoke(0, read())
	r.Return(op, got(""))
	ops := r.Operations()
	require.Len(t, ops, 1)
	assert.Less(t, ops[0].Call, ops[0].Return)
}

package chaos_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service/servicetest/chaos"
)

// clock is a recorder's clock the test moves.
type clock struct{ now time.Time }

func (c *clock) tick() time.Time { c.now = c.now.Add(time.Millisecond); return c.now }

// TestEndSortsOutcomes: nil is ok; a coded error saying nothing ran is
// failed and left out of the history; anything else is unknown.
func TestEndSortsOutcomes(t *testing.T) {
	rec := chaos.NewRecorder(nil)
	dl := time.Now().Add(time.Second)
	for _, tc := range []struct {
		err  error
		want chaos.Outcome
	}{
		{nil, chaos.OK},
		{message.ErrNotOwner, chaos.Failed},
		{message.ErrBadRequest.WithDetails("no"), chaos.Failed},
		{message.ErrTimeout, chaos.Unknown},
		{context.DeadlineExceeded, chaos.Unknown},
		{message.ErrInternal, chaos.Unknown},
	} {
		op := rec.Invoke(0, "k", chaos.RegisterOp{Kind: chaos.Read})
		assert.Equal(t, tc.want, rec.End(op, chaos.RegisterOutput{}, tc.err, dl), "%v", tc.err)
	}
	assert.Equal(t, map[chaos.Outcome]int{chaos.OK: 1, chaos.Failed: 2, chaos.Unknown: 3}, rec.Counts())
	assert.Len(t, rec.Operations("k"), 4, "the failed ones are left out")
	assert.Panics(t, func() { rec.Fail(0) }, "an operation ends once")

	c := &clock{now: time.Unix(0, 0)}
	rec = chaos.NewRecorder(c.tick)
	onTime := rec.Invoke(0, "k", chaos.RegisterOp{Kind: chaos.Read})
	late := rec.Invoke(1, "k", chaos.RegisterOp{Kind: chaos.Read})
	rec.End(onTime, chaos.RegisterOutput{}, nil, c.now.Add(time.Second))
	c.now = c.now.Add(2 * time.Second)
	rec.End(late, nil, message.ErrTimeout, c.now.Add(-time.Second))
	assert.Equal(t, 1, rec.Overdue(0), "the call that ended a second after its deadline")
	assert.Zero(t, rec.Overdue(2*time.Second))
}

// TestModels: each ready model accepts a legal history and refuses one
// with a lost write, a double application or a value from nowhere; an
// unknown outcome may or may not have taken effect.
func TestModels(t *testing.T) {
	type step struct {
		client int
		in     any
		out    any   // nil: unknown outcome
		err    error // a failed call
	}
	run := func(t *testing.T, model porcupine.Model, steps []step) chaos.Report {
		t.Helper()
		c := &clock{now: time.Unix(0, 0)}
		rec := chaos.NewRecorder(c.tick)
		for _, s := range steps { // one after another: each returns before the next is invoked
			op := rec.Invoke(s.client, "k", s.in)
			switch {
			case s.err != nil:
				rec.End(op, nil, s.err, c.now)
			case s.out == nil:
				rec.Unknown(op, c.tick())
			default:
				rec.Return(op, s.out)
			}
		}
		rep, err := chaos.Check(model, rec, time.Second, "")
		require.NoError(t, err)
		return rep
	}
	w := func(v string) chaos.RegisterOp { return chaos.RegisterOp{Kind: chaos.Write, Value: v} }
	r := chaos.RegisterOp{Kind: chaos.Read}
	read := func(v string) chaos.RegisterOutput { return chaos.RegisterOutput{Value: v} }
	ok := chaos.RegisterOutput{}

	assert.True(t, run(t, chaos.Register(""), []step{{0, w("a"), ok, nil}, {1, r, read("a"), nil}, {0, chaos.RegisterOp{Kind: chaos.CAS, Expect: "a", Value: "b"}, chaos.RegisterOutput{Swapped: true}, nil}, {1, r, read("b"), nil}}).OK())
	lost := run(t, chaos.Register(""), []step{{0, w("a"), ok, nil}, {0, w("b"), ok, nil}, {1, r, read("a"), nil}})
	assert.False(t, lost.OK(), "an acknowledged write lost")
	require.Len(t, lost.Illegal, 1)
	assert.Equal(t, "k", lost.Illegal[0].Key)
	assert.NotEmpty(t, lost.Illegal[0].First)
	assert.True(t, run(t, chaos.Register(""), []step{{0, w("a"), nil, nil}, {1, r, read("a"), nil}}).OK(), "an unknown write took effect")
	assert.True(t, run(t, chaos.Register(""), []step{{0, w("a"), nil, nil}, {1, r, read(""), nil}}).OK(), "or did not")
	assert.False(t, run(t, chaos.Register(""), []step{{0, w("a"), nil, message.ErrNotOwner}, {1, r, read("a"), nil}}).OK(), "a failed write must not show")

	add := func(n int64) chaos.CounterOp { return chaos.CounterOp{Add: n} }
	get := chaos.CounterOp{}
	assert.True(t, run(t, chaos.Counter(0), []step{{0, add(2), int64(0), nil}, {1, add(3), int64(0), nil}, {0, get, int64(5), nil}}).OK())
	assert.False(t, run(t, chaos.Counter(0), []step{{0, add(2), int64(0), nil}, {0, get, int64(4), nil}}).OK(), "applied twice")

	assert.True(t, run(t, chaos.Set(), []step{{0, chaos.SetOp{Add: "x"}, "", nil}, {1, chaos.SetOp{Add: "y"}, nil, nil}, {0, chaos.SetOp{}, chaos.SetValue([]string{"y", "x"}), nil}}).OK())
	assert.False(t, run(t, chaos.Set(), []step{{0, chaos.SetOp{Add: "x"}, "", nil}, {0, chaos.SetOp{}, "", nil}}).OK(), "an acknowledged add lost")
}

// TestCheckWritesAVisualization: an illegal history gets porcupine's
// HTML file, named after its resource, in the directory given.
func TestCheckWritesAVisualization(t *testing.T) {
	rec := chaos.NewRecorder(nil)
	op := rec.Invoke(0, "res/1", chaos.RegisterOp{Kind: chaos.Read})
	rec.Return(op, chaos.RegisterOutput{Value: "from nowhere"})
	dir := t.TempDir()
	rep, err := chaos.Check(chaos.Register(""), rec, time.Second, dir)
	require.NoError(t, err)
	require.Len(t, rep.Illegal, 1)
	assert.Contains(t, rep.String(), "from nowhere")
	fi, err := os.Stat(rep.Illegal[0].Visualization)
	require.NoError(t, err)
	assert.Positive(t, fi.Size())
	assert.Contains(t, rep.Illegal[0].Visualization, "chaos-res_1.html")
}

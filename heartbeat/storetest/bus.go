package storetest

import (
	"context"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
)

// testBusStatus checks BeatBus: a Beat that also records whether the
// node reaches the bus, and List reports how long it has not, by the
// store's clock.
func testBusStatus(e *env) {
	beatBus := func(n string, epoch int64, up bool) {
		e.t.Helper()
		require.NoError(e.t, e.s.BeatBus(e.ctx(), n, epoch, up), "BeatBus(%s, %d, busUp=%t) of the current epoch must succeed", n, epoch, up)
	}

	n := node()
	epoch := e.register(n)
	assert.Zero(e.t, e.get(n).BusDown, "a new record reports the bus up: BusDown 0")
	beatBus(n, epoch, true)
	r := e.get(n)
	assert.Equal(e.t, int64(1), r.Seq, "BeatBus increments the sequence, as Beat does")
	assert.Zero(e.t, r.BusDown, "after BeatBus(up) BusDown is 0")

	start := time.Now()
	beatBus(n, epoch, false)
	first := e.get(n)
	since := time.Since(start) // real time from before the BeatBus to after the List
	assert.Equal(e.t, int64(2), first.Seq, "BeatBus(down) is a beat too: it increments the sequence")
	require.Positive(e.t, first.BusDown, "after BeatBus(down) BusDown must be more than 0")
	assert.LessOrEqual(e.t, first.BusDown, since+time.Millisecond, "the first BeatBus(down) must stamp the outage now by the store's clock")

	grown := e.busDown(n, first.BusDown+20*time.Millisecond)
	assert.Greater(e.t, grown.BusDown, first.BusDown, "BusDown must grow with the store's clock")
	beatBus(n, epoch, false)
	again := e.get(n)
	assert.GreaterOrEqual(e.t, again.BusDown, grown.BusDown, "a further BeatBus(down) must keep the stamp of the first, so BusDown goes on growing")
	assert.Less(e.t, again.Age, again.BusDown, "a further BeatBus(down) restamps the beat, not the start of the outage")
	assert.Equal(e.t, first.Seq+1, again.Seq)

	e.beat(n, epoch)
	plain := e.get(n)
	assert.GreaterOrEqual(e.t, plain.BusDown, again.BusDown, "a plain Beat must keep the bus status as it was")
	assert.Equal(e.t, again.Seq+1, plain.Seq)
	if e.h.Advance != nil {
		e.h.Advance(e.t, time.Hour)
		r := e.get(n)
		assert.GreaterOrEqual(e.t, r.BusDown, plain.BusDown+time.Hour, "Advance(1h) must add an hour to BusDown")
		assert.Less(e.t, r.BusDown, plain.BusDown+time.Hour+freshAge, "BusDown must follow the store's clock, not run ahead of it")
	}

	before := e.get(n)
	for _, up := range []bool{true, false} {
		isEvicted(e.t, e.s.BeatBus(e.ctx(), n, epoch+1000003, up), "BeatBus(busUp=%t) with an epoch never registered", up)
	}
	after := e.get(n)
	assert.Equal(e.t, before.Seq, after.Seq, "a BeatBus with another epoch must not change the sequence")
	assert.GreaterOrEqual(e.t, after.BusDown, before.BusDown, "a BeatBus(up) with another epoch must not clear BusDown")

	beatBus(n, epoch, true)
	assert.Zero(e.t, e.get(n).BusDown, "BeatBus(up) must clear BusDown")

	beatBus(n, epoch, false)
	require.Positive(e.t, e.get(n).BusDown)
	cur := e.register(n)
	assert.Zero(e.t, e.get(n).BusDown, "Register must start the new life with the bus up: BusDown 0")
	isEvicted(e.t, e.s.BeatBus(e.ctx(), n, epoch, false), "BeatBus with the epoch of an earlier registration")
	r = e.get(n)
	assert.Zero(e.t, r.Seq, "a BeatBus with another epoch must not change the sequence")
	assert.Zero(e.t, r.BusDown, "a BeatBus(down) with another epoch must not stamp an outage")

	require.NoError(e.t, e.s.Deregister(e.ctx(), n, cur))
	isEvicted(e.t, e.s.BeatBus(e.ctx(), n, cur, false), "BeatBus after Deregister")
	e.absent(n, "a BeatBus after Deregister must not recreate the record")
	evicted := node()
	ee := e.register(evicted)
	ok, err := e.s.Evict(e.ctx(), evicted, ee, 0)
	require.NoError(e.t, err)
	require.True(e.t, ok, "Evict with the listed epoch and sequence must delete")
	isEvicted(e.t, e.s.BeatBus(e.ctx(), evicted, ee, true), "BeatBus after Evict")
	e.absent(evicted, "a BeatBus after Evict must not recreate the record")
	never := node()
	isEvicted(e.t, e.s.BeatBus(e.ctx(), never, 1, false), "BeatBus of a node never registered")
	e.absent(never, "a BeatBus of a node never registered must not create a record")

	c := node()
	ec := e.register(c)
	cancelled, cancel := context.WithCancel(e.ctx())
	cancel()
	expired, cancel2 := context.WithDeadline(e.ctx(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, d := range []struct {
		ctx  context.Context
		want error
	}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		require.ErrorIs(e.t, e.s.BeatBus(d.ctx, c, ec, false), d.want, "BeatBus(down) with a done context")
		r := e.get(c)
		require.Zero(e.t, r.Seq, "a BeatBus with a done context must not change the sequence")
		require.Zero(e.t, r.BusDown, "a BeatBus(down) with a done context must not stamp an outage")
	}
	beatBus(c, ec, false)
	for _, d := range []struct {
		ctx  context.Context
		want error
	}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		require.ErrorIs(e.t, e.s.BeatBus(d.ctx, c, ec, true), d.want, "BeatBus(up) with a done context")
		r := e.get(c)
		require.Equal(e.t, int64(1), r.Seq, "a BeatBus with a done context must not change the sequence")
		require.Positive(e.t, r.BusDown, "a BeatBus(up) with a done context must not clear BusDown")
	}
}

// busDown lets at least d pass on the store's clock, with Advance or by
// waiting, and returns node's record once its BusDown is at least d; the
// node must report its bus down.
func (e *env) busDown(node string, d time.Duration) heartbeat.Record {
	e.t.Helper()
	if e.h.Advance != nil {
		e.h.Advance(e.t, d)
		r := e.get(node)
		require.GreaterOrEqual(e.t, r.BusDown, d, "after Advance(%s) the BusDown of %s must be at least %s", d, node, d)
		return r
	}
	deadline := time.Now().Add(waitLimit)
	for {
		r := e.get(node)
		if r.BusDown >= d {
			return r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the BusDown of %s by the store's clock is %s after %s of real time; it must grow to %s", node, r.BusDown, waitLimit, d)
		}
		time.Sleep(pollEvery)
	}
}

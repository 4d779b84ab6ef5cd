package storetest

import (
	"context"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// freshAge bounds the age of a record just written: generous for a
// remote database, tiny against EvictAfter scales.
const freshAge = 5 * time.Second

func testRegisterList(e *env) {
	a, b := node(), node()
	ea := e.register(a)
	eb := e.register(b)
	got := e.list(a, b)
	require.Len(e.t, got, 2, "List must include every registered node")
	for n, epoch := range map[string]int64{a: ea, b: eb} {
		r := got[n]
		assert.Equal(e.t, n, r.Node, "Record.Node")
		assert.Equal(e.t, epoch, r.Epoch, "List must report the epoch Register returned")
		assert.Zero(e.t, r.Seq, "a new record has sequence 0")
		assert.GreaterOrEqual(e.t, r.Age, time.Duration(0), "an age is never negative")
		assert.Less(e.t, r.Age, freshAge, "a record just registered must be young by the store's clock")
		if e.h.Advance == nil { // real time: the database's clock is this machine's, give or take
			assert.WithinDuration(e.t, time.Now(), r.RegisteredAt(), time.Minute, "an epoch is the store's time of registration in microseconds")
		}
	}
}

func testNewEpoch(e *env) {
	n := node()
	seen := make(map[int64]bool)
	var epoch int64
	for i := range 5 {
		epoch = e.register(n)
		require.False(e.t, seen[epoch], "Register must give a new epoch every time; registration %d repeated epoch %d", i+1, epoch)
		seen[epoch] = true
		e.beat(n, epoch)
	}
	r := e.get(n)
	assert.Equal(e.t, epoch, r.Epoch, "after re-registering, List must show the latest epoch")
	assert.Equal(e.t, int64(1), r.Seq, "re-registering must reset the sequence (one beat since)")
}

func testBeat(e *env) {
	n := node()
	epoch := e.register(n)
	before := e.age(n, 100*time.Millisecond)
	start := time.Now()
	e.beat(n, epoch)
	after := e.get(n)
	since := time.Since(start) // real time from before the Beat to after the List
	assert.Equal(e.t, before.Seq+1, after.Seq, "Beat must increment the sequence")
	assert.Equal(e.t, epoch, after.Epoch, "Beat must keep the epoch")
	// Restamped during the Beat, the record cannot be older at the List
	// than the time since the Beat began (a millisecond of slack for
	// stores with millisecond ages); a loaded machine only makes since
	// longer, never the check flaky.
	assert.LessOrEqual(e.t, after.Age, since+time.Millisecond, "Beat must restamp the record now by the store's clock")
	if since < before.Age {
		assert.Less(e.t, after.Age, before.Age, "Beat must restamp the record now by the store's clock, so its age drops")
	}
	e.beat(n, epoch)
	assert.Equal(e.t, before.Seq+2, e.get(n).Seq, "every Beat increments the sequence")
}

func testBeatStaleEpoch(e *env) {
	n := node()
	old := e.register(n)
	e.beat(n, old)
	cur := e.register(n)
	isEvicted(e.t, e.s.Beat(e.ctx(), n, old), "Beat with the epoch of an earlier registration")
	isEvicted(e.t, e.s.Beat(e.ctx(), n, cur+1000003), "Beat with an epoch never registered")
	r := e.get(n)
	assert.Equal(e.t, cur, r.Epoch, "a Beat with another epoch must not change the record's epoch")
	assert.Zero(e.t, r.Seq, "a Beat with another epoch must not change the sequence")
}

func testBeatGone(e *env) {
	evicted, left, never := node(), node(), node()
	ee := e.register(evicted)
	ok, err := e.s.Evict(e.ctx(), evicted, ee, 0)
	require.NoError(e.t, err)
	require.True(e.t, ok, "Evict with the listed epoch and sequence must delete")
	isEvicted(e.t, e.s.Beat(e.ctx(), evicted, ee), "Beat after Evict")
	e.absent(evicted, "a Beat after Evict must not recreate the record")

	el := e.register(left)
	require.NoError(e.t, e.s.Deregister(e.ctx(), left, el))
	isEvicted(e.t, e.s.Beat(e.ctx(), left, el), "Beat after Deregister")
	e.absent(left, "a Beat after Deregister must not recreate the record")

	isEvicted(e.t, e.s.Beat(e.ctx(), never, 1), "Beat of a node never registered")
	e.absent(never, "a Beat of a node never registered must not create a record")
}

func testEvictCondition(e *env) {
	n := node()
	old := e.register(n)
	epoch := e.register(n)
	e.beat(n, epoch) // seq 1
	for _, c := range []struct {
		epoch, seq int64
		why        string
	}{
		{epoch, 0, "a stale sequence (the node beat since)"},
		{epoch, 2, "a sequence not reached yet"},
		{old, 1, "the epoch of an earlier registration"},
	} {
		ok, err := e.s.Evict(e.ctx(), n, c.epoch, c.seq)
		require.NoError(e.t, err, "Evict with %s is not an error", c.why)
		require.False(e.t, ok, "Evict with %s must not delete", c.why)
		require.Equal(e.t, int64(1), e.get(n).Seq, "Evict with %s must leave the record as it was", c.why)
	}
	ok, err := e.s.Evict(e.ctx(), n, epoch, 1)
	require.NoError(e.t, err)
	require.True(e.t, ok, "Evict with the current epoch and sequence must delete and report true")
	e.absent(n, "after a successful Evict")
	ok, err = e.s.Evict(e.ctx(), n, epoch, 1)
	require.NoError(e.t, err, "Evict of a record already gone is not an error")
	require.False(e.t, ok, "Evict of a record already gone must report false: this call deleted nothing")
	ok, err = e.s.Evict(e.ctx(), node(), 1, 0)
	require.NoError(e.t, err, "Evict of a node never registered is not an error")
	require.False(e.t, ok, "Evict of a node never registered must report false")
}

func testEvictAfterBeat(e *env) {
	n := node()
	epoch := e.register(n)
	seen := e.age(n, 20*time.Millisecond) // stale, as an evictor would see it
	e.beat(n, epoch)                      // the node beats between the evictor's List and Evict
	ok, err := e.s.Evict(e.ctx(), n, seen.Epoch, seen.Seq)
	require.NoError(e.t, err)
	require.False(e.t, ok, "Evict with the sequence listed before a Beat must not delete: the node is alive")
	r := e.get(n)
	assert.Equal(e.t, seen.Seq+1, r.Seq, "the record must keep the newer beat")
}

func testEvictRace(e *env) {
	const nodes, evictors = 10, 4
	var ns []string
	for range nodes {
		n := node()
		e.register(n)
		ns = append(ns, n)
	}
	recs := e.list(ns...)
	require.Len(e.t, recs, nodes)
	wins := make(chan string, nodes*evictors)
	errs := make(chan error, nodes*evictors)
	start := make(chan struct{})
	done := make(chan struct{})
	pending := nodes * evictors
	for _, n := range ns {
		r := recs[n]
		for range evictors {
			go func() {
				defer func() { done <- struct{}{} }()
				<-start
				ok, err := e.s.Evict(e.ctx(), r.Node, r.Epoch, r.Seq)
				if err != nil {
					errs <- err
				}
				if ok {
					wins <- r.Node
				}
			}()
		}
	}
	close(start)
	for ; pending > 0; pending-- {
		<-done
	}
	close(wins)
	close(errs)
	for err := range errs {
		require.NoError(e.t, err, "concurrent Evict must not fail")
	}
	count := make(map[string]int)
	for n := range wins {
		count[n]++
	}
	for _, n := range ns {
		assert.Equal(e.t, 1, count[n], "of %d concurrent Evicts of one record exactly one must report true (node %s)", evictors, n)
	}
	assert.Empty(e.t, e.list(ns...), "every record must be gone after the race")
}

func testDeregister(e *env) {
	n := node()
	old := e.register(n)
	epoch := e.register(n)
	require.NoError(e.t, e.s.Deregister(e.ctx(), n, old), "Deregister with another epoch is not an error")
	require.Equal(e.t, epoch, e.get(n).Epoch, "Deregister with the epoch of an earlier registration must not delete the current record")
	require.NoError(e.t, e.s.Deregister(e.ctx(), n, epoch))
	e.absent(n, "after Deregister with the current epoch")
	require.NoError(e.t, e.s.Deregister(e.ctx(), n, epoch), "Deregister is idempotent: a record already gone is not an error")
	require.NoError(e.t, e.s.Deregister(e.ctx(), node(), 1), "Deregister of a node never registered is not an error")
}

func testAge(e *env) {
	older, younger := node(), node()
	e.register(older)
	first := e.age(older, 30*time.Millisecond)
	e.register(younger)
	got := e.list(older, younger)
	assert.Greater(e.t, got[older].Age, got[younger].Age, "a record registered earlier must be older by the store's clock")
	later := e.age(older, first.Age+20*time.Millisecond)
	assert.Greater(e.t, later.Age, first.Age, "the age must grow with the store's clock")
	if e.h.Advance != nil {
		e.h.Advance(e.t, time.Hour)
		r := e.get(older)
		assert.GreaterOrEqual(e.t, r.Age, later.Age+time.Hour, "Advance(1h) must age the record by an hour")
		assert.Less(e.t, r.Age, later.Age+time.Hour+freshAge, "Age must follow the store's clock, not run ahead of it")
	}
}

func testContext(e *env) {
	n := node()
	epoch := e.register(n)
	cancelled, cancel := context.WithCancel(e.ctx())
	cancel()
	expired, cancel2 := context.WithDeadline(e.ctx(), time.Now().Add(-time.Second))
	defer cancel2()

	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		fresh := node()
		_, err := e.s.Register(c.ctx, fresh)
		require.ErrorIs(e.t, err, c.want, "Register with a done context must return the context's error")
		e.absent(fresh, "a Register with a done context must not create a record")

		require.ErrorIs(e.t, e.s.Beat(c.ctx, n, epoch), c.want, "Beat with a done context")
		require.Zero(e.t, e.get(n).Seq, "a Beat with a done context must not change the record")

		_, err = e.s.List(c.ctx)
		require.ErrorIs(e.t, err, c.want, "List with a done context")

		ok, err := e.s.Evict(c.ctx, n, epoch, 0)
		require.ErrorIs(e.t, err, c.want, "Evict with a done context")
		require.False(e.t, ok, "a failed Evict reports false")
		e.get(n) // still there

		require.ErrorIs(e.t, e.s.Deregister(c.ctx, n, epoch), c.want, "Deregister with a done context")
		e.get(n) // still there
	}
}

func testStoreTime(e *env) {
	before, res, err := e.s.StoreTime(e.ctx())
	require.NoError(e.t, err, "StoreTime must succeed")
	require.LessOrEqual(e.t, res, time.Millisecond, "StoreTime's resolution must be a millisecond or better")
	n := node()
	e.register(n)
	after, _, err := e.s.StoreTime(e.ctx())
	require.NoError(e.t, err)
	require.False(e.t, after.Before(before), "the store's time must not go back")
	r := e.age(n, 20*time.Millisecond)
	now, _, err := e.s.StoreTime(e.ctx())
	require.NoError(e.t, err)
	// The record was stamped between before and after, and listed
	// before now, all on the store's clock.
	assert.LessOrEqual(e.t, r.Age, now.Sub(before)+2*res, "StoreTime must read the clock that stamps beats: the age exceeds the time StoreTime saw pass")
	cancelled, cancel := context.WithCancel(e.ctx())
	cancel()
	_, _, err = e.s.StoreTime(cancelled)
	require.ErrorIs(e.t, err, context.Canceled, "StoreTime with a done context")
	if e.h.Advance != nil {
		e.h.Advance(e.t, time.Hour)
		later, _, err := e.s.StoreTime(e.ctx())
		require.NoError(e.t, err)
		assert.GreaterOrEqual(e.t, later.Sub(now), time.Hour, "Advance(1h) must move StoreTime by an hour")
	}
}

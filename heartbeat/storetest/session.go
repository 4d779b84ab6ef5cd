package storetest

import (
	"context"
	"sync"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
)

// sessionScenarios check [heartbeat.SessionLocker], on stores that
// implement it; on others each skips, saying so.
var sessionScenarios = []scenario{
	{"session lock: free until held, held until released", testSessionHold},
	{"session lock: a test of a free lock leaves it free", testSessionProbe},
	{"session lock: an ended session frees the lock at once", testSessionEnded},
	{"session lock: of concurrent holders exactly one wins", testSessionRace},
	{"session lock: a done context is honoured", testSessionContext},
}

// locker returns the store as a SessionLocker, or skips the scenario.
func (e *env) locker() heartbeat.SessionLocker {
	e.t.Helper()
	l, ok := e.s.(heartbeat.SessionLocker)
	if !ok {
		e.t.Skip("the store does not implement heartbeat.SessionLocker")
	}
	return l
}

// free reports whether node's session lock is free, requiring no error.
func free(e *env, l heartbeat.SessionLocker, node string) bool {
	e.t.Helper()
	ok, err := l.SessionFree(e.ctx(), node)
	require.NoError(e.t, err, "SessionFree(%s) must succeed", node)
	return ok
}

// hold takes node's session lock and releases it when the test ends.
func hold(e *env, l heartbeat.SessionLocker, node string) heartbeat.SessionHold {
	e.t.Helper()
	h, err := l.HoldSession(e.ctx(), node)
	require.NoError(e.t, err, "HoldSession(%s) of a free lock must succeed", node)
	e.t.Cleanup(func() { _ = h.Release() })
	return h
}

func testSessionHold(e *env) {
	l := e.locker()
	n, other := node(), node()
	require.True(e.t, free(e, l, n), "a lock nobody took is free")
	h := hold(e, l, n)
	require.False(e.t, free(e, l, n), "a held lock is not free")
	require.NoError(e.t, h.Check(e.ctx()), "Check of a held lock")
	_, err := l.HoldSession(e.ctx(), n)
	require.ErrorIs(e.t, err, heartbeat.ErrSessionHeld, "a second HoldSession of a held lock")
	require.True(e.t, free(e, l, other), "another node's lock is free while this one is held")
	ho := hold(e, l, other)
	require.False(e.t, free(e, l, n), "taking another node's lock leaves this one held")

	require.NoError(e.t, h.Release())
	require.True(e.t, free(e, l, n), "a released lock is free")
	require.ErrorIs(e.t, h.Check(e.ctx()), heartbeat.ErrSessionLost, "Check of a released hold")
	require.NoError(e.t, h.Release(), "Release is idempotent")
	require.False(e.t, free(e, l, other), "releasing one node's lock leaves another's held")
	require.NoError(e.t, ho.Release())

	again := hold(e, l, n)
	require.NoError(e.t, again.Check(e.ctx()), "a lock released can be held again")
}

func testSessionProbe(e *env) {
	l := e.locker()
	n := node()
	for range 3 {
		require.True(e.t, free(e, l, n), "a free lock stays free after a test")
	}
	h := hold(e, l, n)
	require.NoError(e.t, h.Check(e.ctx()), "a lock tested free can be held")
	for range 3 {
		require.False(e.t, free(e, l, n), "a test of a held lock does not take it")
	}
	require.NoError(e.t, h.Check(e.ctx()), "a test of a held lock leaves it with its holder")
}

func testSessionEnded(e *env) {
	l := e.locker()
	if e.h.EndSession == nil {
		e.t.Skip("Harness.EndSession is nil: the harness cannot end a session as a crash would")
	}
	n := node()
	h := hold(e, l, n)
	start := time.Now()
	e.h.EndSession(e.t, e.s, n, h)
	var took time.Duration
	for {
		if free(e, l, n) {
			took = time.Since(start)
			break
		}
		if time.Since(start) > waitLimit {
			e.t.Fatalf("the lock of a session that ended is still held after %s", waitLimit)
		}
		time.Sleep(pollEvery)
	}
	e.t.Logf("the lock was free %s after the session ended", took.Round(time.Millisecond))
	assert.Less(e.t, took, 2*time.Second, "a lock is free within 2 s of its session's end")
	require.ErrorIs(e.t, h.Check(e.ctx()), heartbeat.ErrSessionLost, "Check of a hold whose session ended")
	require.NoError(e.t, h.Release(), "Release of a hold whose session ended")
	again := hold(e, l, n)
	require.NoError(e.t, again.Check(e.ctx()), "the node can hold its lock again")
}

func testSessionRace(e *env) {
	l := e.locker()
	n := node()
	const racers = 8
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		won   []heartbeat.SessionHold
		other []error
	)
	for range racers {
		wg.Go(func() {
			h, err := l.HoldSession(e.ctx(), n)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, h)
			default:
				other = append(other, err)
			}
		})
	}
	wg.Wait()
	for _, h := range won {
		e.t.Cleanup(func() { _ = h.Release() })
	}
	require.Len(e.t, won, 1, "exactly one of %d concurrent HoldSession calls wins", racers)
	for _, err := range other {
		require.ErrorIs(e.t, err, heartbeat.ErrSessionHeld, "the others fail with ErrSessionHeld")
	}
}

func testSessionContext(e *env) {
	l := e.locker()
	n := node()
	done, cancel := context.WithCancel(e.ctx())
	cancel()
	_, err := l.HoldSession(done, n)
	require.ErrorIs(e.t, err, context.Canceled, "HoldSession with a done context")
	_, err = l.SessionFree(done, n)
	require.ErrorIs(e.t, err, context.Canceled, "SessionFree with a done context")
	require.True(e.t, free(e, l, n), "a HoldSession with a done context takes nothing")
	h := hold(e, l, n)
	require.ErrorIs(e.t, h.Check(done), context.Canceled, "Check with a done context")
}

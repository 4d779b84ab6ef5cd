// Package fencetest is the conformance suite of the fence
// implementations (sqlfence on SQLite, PostgreSQL and MariaDB/MySQL, and
// the in-memory twin memfence): every implementation runs [Run], so the
// twin behaves like the databases.
//
// The suite writes through a [Subject]: an append-only log per resource,
// each entry written in a transaction guarded by a fence.Guard. Its main
// invariant is that no stale commit happens: in commit order, a
// resource's entries never go back to a lower token, and an entry is
// committed only by a claimant whose claim held, even when the writer
// stalls between its check and its commit while peers evict it and
// another node takes the resource over.
package fencetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
)

// Subject is one fence implementation with a log to write through it.
type Subject interface {
	// Members is the heartbeat store whose records authorize claims.
	Members() heartbeat.Store
	// Append appends value to w.Claim.Resource's log (or, for a Write
	// without a claim, to the log of resource) in one transaction guarded
	// by w, and returns the reply: value when the transaction ran, or the
	// first reply for a message handled before. The transaction calls hook
	// after the fence's checks, then verifies the claim (if any) with the
	// implementation's Verify, as a handler does before a side effect
	// outside the database, then writes; if hook returns an error, the
	// transaction writes its entry, then fails with that error, so nothing
	// may be committed.
	Append(ctx context.Context, resource string, w fence.Guard, value string, hook func() error) ([]byte, error)
	// Log returns resource's committed entries in commit order.
	Log(ctx context.Context, resource string) ([]Entry, error)
}

// Counted is a [Subject] whose fence counts what its Do did (the
// fences' Stats method). [Run] checks the counts of a Subject that
// implements it.
type Counted interface {
	Subject
	// Stats returns the fence's counts.
	Stats() fence.Stats
}

// Entry is one committed log entry.
type Entry struct {
	// Value is what was appended.
	Value string
	// Token is the fencing token the writer held (0 without a claim).
	Token fence.Token
}

// NewSubject returns a fresh subject whose claims hold while the node's
// record in Members beat less than maxAge ago. It registers its cleanup
// with t.
type NewSubject func(t *testing.T, maxAge time.Duration) Subject

// Run runs the suite.
func Run(t *testing.T, newSubject NewSubject) {
	t.Run("TokenMovesWithTheClaimant", func(t *testing.T) { testTokens(t, newSubject(t, 5*time.Second)) })
	t.Run("EvictedClaimRejected", func(t *testing.T) { testEvicted(t, newSubject(t, 5*time.Second)) })
	t.Run("OldLifeRejected", func(t *testing.T) { testOldLife(t, newSubject(t, 5*time.Second)) })
	t.Run("SilentClaimantRejected", func(t *testing.T) { testSilent(t, newSubject(t, 300*time.Millisecond)) })
	t.Run("TakeoverBetweenCheckAndCommit", func(t *testing.T) { testStall(t, newSubject(t, 5*time.Second)) })
	t.Run("EvictedWhileWaiting", func(t *testing.T) { testEvictedWhileWaiting(t, newSubject(t, 5*time.Second)) })
	t.Run("NoStaleCommitUnderChurn", func(t *testing.T) { testChurn(t, newSubject(t, 5*time.Second)) })
	t.Run("RepeatReturnsFirstReply", func(t *testing.T) { testRepeat(t, newSubject(t, 5*time.Second)) })
	t.Run("ReusedIDRefused", func(t *testing.T) { testReused(t, newSubject(t, 5*time.Second)) })
	t.Run("ConcurrentDuplicateRunsOnce", func(t *testing.T) { testConcurrentDuplicate(t, newSubject(t, 5*time.Second)) })
	t.Run("FailureRecordsNothing", func(t *testing.T) { testFailure(t, newSubject(t, 5*time.Second)) })
	t.Run("StatsCountEachOutcome", func(t *testing.T) { testStats(t, newSubject(t, 5*time.Second)) })
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// node is a registered member.
type node struct {
	id    string
	epoch int64
}

func register(t *testing.T, ctx context.Context, s Subject) node {
	t.Helper()
	id := message.NewUUID()
	epoch, err := s.Members().Register(ctx, id)
	if err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
	return node{id, epoch}
}

func (n node) claim(resource string) fence.Claim {
	return fence.Claim{Resource: resource, Node: n.id, Epoch: n.epoch}
}

func key(value string) fence.Key {
	return fence.NewKey(message.NewUUID(), "fencetest.Append", []byte(value))
}

func entries(t *testing.T, ctx context.Context, s Subject, resource string) []Entry {
	t.Helper()
	log, err := s.Log(ctx, resource)
	if err != nil {
		t.Fatalf("read the log of %s: %v", resource, err)
	}
	return log
}

// checkOrder fails t if, in commit order, an entry has a lower token
// than one committed before it: a stale commit.
func checkOrder(t *testing.T, log []Entry) (stale int) {
	t.Helper()
	var high fence.Token
	for i, e := range log {
		if e.Token < high {
			stale++
			t.Errorf("stale commit: entry %d (%q) has token %d after token %d was committed", i, e.Value, e.Token, high)
		}
		high = max(high, e.Token)
	}
	return stale
}

func mustStale(t *testing.T, err error, what string) {
	t.Helper()
	var se *fence.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fence.ErrStale) || !errors.Is(err, message.ErrNotOwner) {
		t.Fatalf("%s: got %v, want a *fence.StaleError matching fence.ErrStale and message.ErrNotOwner", what, err)
	}
	if message.CodeOf(err) != message.ErrNotOwner.Code {
		t.Fatalf("%s: wire code %s, want %s", what, message.CodeOf(err), message.ErrNotOwner.Code)
	}
}

func testTokens(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	a, b := register(t, ctx, s), register(t, ctx, s)
	res := message.NewUUID()
	steps := []struct {
		who  node
		move bool
	}{{a, true}, {a, false}, {b, true}, {b, false}, {a, true}}
	for i, st := range steps {
		v := fmt.Sprint("v", i)
		if _, err := s.Append(ctx, res, fence.Guard{Claim: st.who.claim(res), Key: key(v)}, v, nil); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	log := entries(t, ctx, s, res)
	if len(log) != len(steps) {
		t.Fatalf("log has %d entries, want %d: %+v", len(log), len(steps), log)
	}
	if log[0].Token < 1 {
		t.Fatalf("first token %d, want at least 1", log[0].Token)
	}
	for i := 1; i < len(steps); i++ {
		if steps[i].move && log[i].Token <= log[i-1].Token {
			t.Errorf("step %d moved the resource to another node: token %d, want more than %d", i, log[i].Token, log[i-1].Token)
		}
		if !steps[i].move && log[i].Token != log[i-1].Token {
			t.Errorf("step %d kept the claimant: token %d, want %d", i, log[i].Token, log[i-1].Token)
		}
	}
}

func testEvicted(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	a := register(t, ctx, s)
	res := message.NewUUID()
	if _, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res)}, "before", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Members().Deregister(ctx, a.id, a.epoch); err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res), Key: key("after")}, "after", func() error { ran = true; return nil })
	mustStale(t, err, "a write by an evicted node")
	if ran {
		t.Error("the transaction ran past a failed check")
	}
	// A resource the evicted node never touched: its first claim fails too.
	other := message.NewUUID()
	_, err = s.Append(ctx, other, fence.Guard{Claim: a.claim(other)}, "first", nil)
	mustStale(t, err, "a first claim by an evicted node")
	if log := entries(t, ctx, s, res); len(log) != 1 {
		t.Fatalf("log %+v, want only the entry written before the eviction", log)
	}
	if log := entries(t, ctx, s, other); len(log) != 0 {
		t.Fatalf("log %+v, want empty", log)
	}
}

func testOldLife(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	a := register(t, ctx, s)
	res := message.NewUUID()
	if _, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res)}, "old", nil); err != nil {
		t.Fatal(err)
	}
	epoch, err := s.Members().Register(ctx, a.id) // evicted and rejoined
	if err != nil {
		t.Fatal(err)
	}
	old := a
	a.epoch = epoch
	_, err = s.Append(ctx, res, fence.Guard{Claim: old.claim(res)}, "stale", nil)
	mustStale(t, err, "a write by the node's old life")
	if _, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res)}, "new", nil); err != nil {
		t.Fatal(err)
	}
	log := entries(t, ctx, s, res)
	if len(log) != 2 || log[1].Token <= log[0].Token {
		t.Fatalf("log %+v: want the new life's entry with a higher token", log)
	}
}

func testSilent(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	a := register(t, ctx, s)
	res := message.NewUUID()
	if _, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res)}, "fresh", nil); err != nil {
		t.Fatalf("a fresh claimant: %v", err)
	}
	// a stops beating; within its max age (300 ms) plus slack, its
	// claim stops holding though its record is still there.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		_, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res)}, fmt.Sprint("late", i), nil)
		if err != nil {
			mustStale(t, err, "a claimant that stopped beating")
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a claimant that stopped beating still writes after 10 s")
		}
		time.Sleep(20 * time.Millisecond) // polling, bounded by the deadline
	}
	// Beating again makes the claim hold again (same life).
	if err := s.Members().Beat(ctx, a.id, a.epoch); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res)}, "again", nil); err != nil {
		t.Fatalf("after a beat: %v", err)
	}
}

// testStall is the acceptance case: a writer passes its check, then
// stalls; peers evict it and another node takes the resource over; the
// writer resumes and tries to commit. Either the takeover waited for the
// writer's transaction (a row lock: the writer commits first, the new
// owner after it with a higher token) or the writer's commit fails with
// a StaleError; in no case does the old token commit after the new one.
func testStall(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	for round := range 3 {
		a, b := register(t, ctx, s), register(t, ctx, s)
		res := message.NewUUID()
		if _, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res)}, "a0", nil); err != nil {
			t.Fatal(err)
		}
		checked, release := make(chan struct{}), make(chan struct{})
		aErr := make(chan error, 1)
		go func() {
			_, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res), Key: key("a1")}, "a1", func() error {
				close(checked)
				<-release
				return nil
			})
			aErr <- err
		}()
		select {
		case <-checked:
		case err := <-aErr:
			t.Fatalf("round %d: the writer failed before its stall: %v", round, err)
		}
		evicted, bErr := make(chan error, 1), make(chan error, 1)
		go func() { evicted <- s.Members().Deregister(ctx, a.id, a.epoch) }()
		go func() {
			_, err := s.Append(ctx, res, fence.Guard{Claim: b.claim(res), Key: key("b1")}, "b1", nil)
			bErr <- err
		}()
		// Give the takeover its chance to run before the writer resumes:
		// it either completes (the implementation preempted the stalled
		// writer) or blocks on the writer's lock, which is as good.
		var bDone bool
		var bResult error
		select {
		case bResult = <-bErr:
			bDone = true
		case <-time.After(time.Second):
		}
		close(release)
		errA := <-aErr
		if !bDone {
			bResult = <-bErr
		}
		if err := <-evicted; err != nil {
			t.Fatal(err)
		}
		if bResult != nil {
			t.Fatalf("round %d: the new owner's write failed: %v", round, bResult)
		}
		log := entries(t, ctx, s, res)
		checkOrder(t, log)
		if errA != nil {
			mustStale(t, errA, "the stalled writer's commit")
			if len(log) != 2 || log[1].Value != "b1" {
				t.Fatalf("round %d: log %+v, want a0, b1", round, log)
			}
		} else if len(log) != 3 || log[1].Value != "a1" || log[2].Value != "b1" {
			t.Fatalf("round %d: the stalled writer committed, so it must precede the takeover: log %+v", round, log)
		}
		t.Logf("round %d: stalled writer: %v; log %+v", round, errA, log)
	}
}

// testChurn writes concurrently from three nodes while their lives end
// and begin again; every commit must be in token order and every
// acknowledged write present once.
func testChurn(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	res := message.NewUUID()
	var mu sync.Mutex
	nodes := []node{register(t, ctx, s), register(t, ctx, s), register(t, ctx, s)}
	pick := func(i int) node {
		mu.Lock()
		defer mu.Unlock()
		return nodes[i%len(nodes)]
	}
	var wg sync.WaitGroup
	var acked sync.Map
	var stale, failed atomic.Int64
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // the nemesis: a node's life ends and a new one begins
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			n := pick(i)
			epoch, err := s.Members().Register(ctx, n.id)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			nodes[i%len(nodes)].epoch = epoch
			mu.Unlock()
		}
	}()
	var writers sync.WaitGroup
	for w := range 6 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := range 15 {
				v := fmt.Sprintf("w%d-%d", w, i)
				_, err := s.Append(ctx, res, fence.Guard{Claim: pick(w + i).claim(res), Key: key(v)}, v, nil)
				switch {
				case err == nil:
					acked.Store(v, true)
				case errors.Is(err, fence.ErrStale):
					stale.Add(1)
				default:
					failed.Add(1)
					t.Logf("write %s: %v", v, err)
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	log := entries(t, ctx, s, res)
	checkOrder(t, log)
	seen := map[string]int{}
	for _, e := range log {
		seen[e.Value]++
	}
	n := 0
	acked.Range(func(k, _ any) bool {
		n++
		if seen[k.(string)] != 1 {
			t.Errorf("acknowledged write %s is in the log %d times, want once", k, seen[k.(string)])
		}
		return true
	})
	if n == 0 {
		t.Fatal("no write succeeded")
	}
	t.Logf("%d acknowledged, %d refused as stale, %d other failures, %d in the log", n, stale.Load(), failed.Load(), len(log))
}

func testRepeat(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	a, b := register(t, ctx, s), register(t, ctx, s)
	res := message.NewUUID()
	k := key("once")
	runs := 0
	hook := func() error { runs++; return nil }
	first, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res), Key: k}, "once", hook)
	if err != nil {
		t.Fatal(err)
	}
	// Redelivered to the same node, then to another (the first died).
	for _, n := range []node{a, b} {
		again, err := s.Append(ctx, res, fence.Guard{Claim: n.claim(res), Key: k}, "once", hook)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(first) {
			t.Fatalf("repeat reply %q, want the first reply %q", again, first)
		}
	}
	// A creation: no claim, the key alone.
	other := message.NewUUID()
	k2 := key("create")
	for range 2 {
		if _, err := s.Append(ctx, other, fence.Guard{Key: k2}, "create", hook); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 2 {
		t.Fatalf("the transactions ran %d times, want 2 (once per message)", runs)
	}
	if log := entries(t, ctx, s, res); len(log) != 1 {
		t.Fatalf("log %+v, want one entry", log)
	}
	if log := entries(t, ctx, s, other); len(log) != 1 {
		t.Fatalf("log %+v, want one entry", log)
	}
}

func testReused(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	res := message.NewUUID()
	k := key("one")
	if _, err := s.Append(ctx, res, fence.Guard{Key: k}, "one", nil); err != nil {
		t.Fatal(err)
	}
	for _, other := range []fence.Key{fence.NewKey(k.ID, k.Type, []byte("two")), fence.NewKey(k.ID, "fencetest.Other", []byte("one"))} {
		_, err := s.Append(ctx, res, fence.Guard{Key: other}, "two", nil)
		if !errors.Is(err, fence.ErrKeyReused) || !errors.Is(err, message.ErrBadRequest) {
			t.Fatalf("id reused for another message: got %v, want fence.ErrKeyReused and message.ErrBadRequest", err)
		}
	}
}

// testConcurrentDuplicate delivers one message twice at once, as two
// nodes consuming a redelivery would: one runs, the other waits and gets
// its reply.
func testConcurrentDuplicate(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	for _, fenced := range []bool{false, true} {
		a, b := register(t, ctx, s), register(t, ctx, s)
		res := message.NewUUID()
		k := key("dup")
		write := func(n node) fence.Guard {
			if fenced {
				return fence.Guard{Claim: n.claim(res), Key: k}
			}
			return fence.Guard{Key: k}
		}
		var runs atomic.Int32
		started, release := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		var r1, r2 []byte
		go func() {
			var err error
			r1, err = s.Append(ctx, res, write(a), "dup", func() error {
				runs.Add(1)
				close(started)
				<-release
				return nil
			})
			first <- err
		}()
		<-started
		second := make(chan error, 1)
		go func() {
			var err error
			r2, err = s.Append(ctx, res, write(b), "dup", func() error { runs.Add(1); return nil })
			second <- err
		}()
		select {
		case err := <-second:
			t.Fatalf("fenced=%v: the second delivery finished while the first was running (err %v): it did not wait", fenced, err)
		case <-time.After(200 * time.Millisecond): // it waits, as it should
		}
		close(release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-second; err != nil {
			t.Fatal(err)
		}
		if runs.Load() != 1 || string(r1) != string(r2) {
			t.Fatalf("fenced=%v: ran %d times, replies %q and %q; want once and equal", fenced, runs.Load(), r1, r2)
		}
		if log := entries(t, ctx, s, res); len(log) != 1 {
			t.Fatalf("fenced=%v: log %+v, want one entry", fenced, log)
		}
	}
}

func testFailure(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	a := register(t, ctx, s)
	res := message.NewUUID()
	k := key("v")
	boom := message.ErrBusy.WithDetails("fencetest: the handler failed")
	_, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res), Key: k}, "v", func() error { return boom })
	if !errors.Is(err, message.ErrBusy) {
		t.Fatalf("got %v, want the handler's error", err)
	}
	if log := entries(t, ctx, s, res); len(log) != 0 {
		t.Fatalf("a failed transaction committed: %+v", log)
	}
	// Nothing was recorded for the message: its next delivery runs.
	ran := false
	if _, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res), Key: k}, "v", func() error { ran = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if !ran {
		t.Fatal("a message whose first run failed did not run again")
	}
}

// testEvictedWhileWaiting: a claimant waits for a resource another
// transaction holds, and is evicted while it waits; when the resource is
// free, its claim must be judged as it is then, not as it was when it
// started waiting.
func testEvictedWhileWaiting(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	a, b := register(t, ctx, s), register(t, ctx, s)
	res := message.NewUUID()
	holding, release := make(chan struct{}), make(chan struct{})
	bErr := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, res, fence.Guard{Claim: b.claim(res)}, "b", func() error {
			close(holding)
			<-release
			return nil
		})
		bErr <- err
	}()
	<-holding
	aErr := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res)}, "a", nil)
		aErr <- err
	}()
	select {
	case err := <-aErr:
		t.Fatalf("a claimant did not wait for the resource held by another transaction: %v", err)
	case <-time.After(300 * time.Millisecond): // it waits, as it should
	}
	evicted := make(chan error, 1)
	go func() { evicted <- s.Members().Deregister(ctx, a.id, a.epoch) }()
	var evictErr error
	evictDone := false
	select {
	case evictErr = <-evicted: // an eviction may also wait for the waiter (MariaDB's shared locks)
		evictDone = true
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-bErr; err != nil {
		t.Fatal(err)
	}
	errA := <-aErr
	if !evictDone {
		evictErr = <-evicted
	}
	if evictErr != nil {
		t.Fatal(evictErr)
	}
	log := entries(t, ctx, s, res)
	checkOrder(t, log)
	if errA == nil {
		// It may have been judged before the eviction committed (an
		// eviction that waited for it), but then it was still live.
		t.Logf("the waiting claimant committed before its eviction took effect: log %+v", log)
		return
	}
	mustStale(t, errA, "a claimant evicted while it waited")
	if len(log) != 1 || log[0].Value != "b" {
		t.Fatalf("log %+v, want only b", log)
	}
}

// testStats checks that a run, a repeat and a stale claim each count
// once, and a failure of the transaction counts nowhere.
func testStats(t *testing.T, s Subject) {
	c, ok := s.(Counted)
	if !ok {
		t.Skip("the subject does not implement fencetest.Counted")
	}
	ctx := ctxFor(t)
	a := register(t, ctx, s)
	res := message.NewUUID()
	if got := c.Stats(); got != (fence.Stats{}) {
		t.Fatalf("a new fence counts %+v, want zero", got)
	}
	k := key("counted")
	if _, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res), Key: k}, "counted", nil); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Stats(), (fence.Stats{Runs: 1}); got != want {
		t.Fatalf("after a run: %+v, want %+v", got, want)
	}
	if _, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res), Key: k}, "counted", nil); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Stats(), (fence.Stats{Runs: 1, Repeats: 1}); got != want {
		t.Fatalf("after a repeat: %+v, want %+v", got, want)
	}
	failed := errors.New("the handler failed")
	if _, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res), Key: key("fails")}, "fails", func() error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("a failing transaction returned %v, want %v", err, failed)
	}
	if got, want := c.Stats(), (fence.Stats{Runs: 1, Repeats: 1}); got != want {
		t.Fatalf("after a failure: %+v, want %+v (a failure is none of them)", got, want)
	}
	if err := s.Members().Deregister(ctx, a.id, a.epoch); err != nil {
		t.Fatal(err)
	}
	_, err := s.Append(ctx, res, fence.Guard{Claim: a.claim(res), Key: key("stale")}, "stale", nil)
	mustStale(t, err, "a write by an evicted node")
	if got, want := c.Stats(), (fence.Stats{Runs: 1, Repeats: 1, Stale: 1}); got != want {
		t.Fatalf("after a stale claim: %+v, want %+v", got, want)
	}
}

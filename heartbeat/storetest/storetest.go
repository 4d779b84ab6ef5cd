// Package storetest is the conformance suite every [heartbeat.Store] runs,
// unchanged, in the manner of testing/slogtest: the in-memory store runs
// it, the SQL stores run it against a real database, and so should yours.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			New: func(t *testing.T) heartbeat.Store { return mystore.New(db(t)) },
//		})
//	}
//
// [Run] checks, each in its own named subtest whose failure messages name
// the rule broken, every method of the [heartbeat.Store] contract:
// records, epochs and sequences; conditional beats, evictions and
// deregistrations; ages, bus status and StoreTime by the store's clock;
// the queue book; done contexts; and concurrent use (run with -race).
// A store that implements [heartbeat.SessionLocker] is checked for it
// too: a lock held until released, tests that take nothing, one winner
// among concurrent holders and, with [Harness.EndSession], a lock free at
// once when its session ends. No other scenario skips.
//
// Every scenario uses fresh random node UUIDs and looks only at its own
// records (and queues), so stores sharing one table (parallel test
// processes against one database) may run the suite at the same time:
// the suite never assumes the store is empty.
//
// Time: a store whose clock the test controls passes [Harness.Advance];
// for a real database it is nil, and the suite waits for real time
// instead, polling with a deadline, never more than a few tens of
// milliseconds per scenario.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
)

// Harness tells the suite how to build the store under test.
type Harness struct {
	// New returns the store for one scenario. It may be a fresh store or
	// share its records with other scenarios and processes. It may
	// register cleanups with t.
	New func(t *testing.T) heartbeat.Store
	// Advance, if set, moves the clock of the stores New returned forward
	// by d, at once. Leave it nil for a store on real time (a database):
	// the suite then waits for real time to pass instead.
	Advance func(t *testing.T, d time.Duration)
	// EndSession, if set, ends the session that holds node's lock as h,
	// as the database would when the holder's process dies or its
	// connection is reset (s is the store New returned). The session lock scenarios then
	// check that the lock is free at once; without it that one skips.
	EndSession func(t *testing.T, s heartbeat.Store, node string, h heartbeat.SessionHold)
}

// Run runs every scenario as a named subtest.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("storetest: Harness.New is required")
	}
	for _, s := range append(scenarios[:len(scenarios):len(scenarios)], sessionScenarios...) {
		t.Run(s.name, func(t *testing.T) {
			s.run(&env{t: t, h: h, s: h.New(t)})
		})
	}
}

type scenario struct {
	name string
	run  func(e *env)
}

// scenarios lists every scenario, in the order they run.
var scenarios = []scenario{
	{"register then list", testRegisterList},
	{"register gives a new epoch every time", testNewEpoch},
	{"beat increments the sequence and resets the age", testBeat},
	{"beat with another epoch returns ErrEvicted and changes nothing", testBeatStaleEpoch},
	{"beat after eviction or deregistration returns ErrEvicted", testBeatGone},
	{"evict needs the current epoch and sequence", testEvictCondition},
	{"a node that beat after the list is not evicted", testEvictAfterBeat},
	{"of concurrent evictors exactly one wins", testEvictRace},
	{"deregister deletes only its epoch and is idempotent", testDeregister},
	{"age is by the store's clock and grows", testAge},
	{"a done context is honoured and changes nothing", testContext},
	{"concurrent beats, lists and evicts are consistent", testConcurrent},
	{"the store's time is the clock that stamps beats", testStoreTime},
	{"bus status is recorded with beats", testBusStatus},
	{"queues are recorded per node", testQueues},
	{"concurrent queue writes are consistent", testQueuesConcurrent},
}

// env is one scenario's store and helpers.
type env struct {
	t *testing.T
	h Harness
	s heartbeat.Store
}

// pollEvery is how often the suite lists while it waits for real time.
const pollEvery = 5 * time.Millisecond

// waitLimit bounds every wait for real time.
const waitLimit = 10 * time.Second

func (e *env) ctx() context.Context { return e.t.Context() }

// node returns a fresh random node UUID.
func node() string { return message.NewUUID() }

// register registers node and returns the epoch.
func (e *env) register(node string) int64 {
	e.t.Helper()
	epoch, err := e.s.Register(e.ctx(), node)
	require.NoError(e.t, err, "Register(%s) must succeed", node)
	return epoch
}

// beat beats node and requires success.
func (e *env) beat(node string, epoch int64) {
	e.t.Helper()
	require.NoError(e.t, e.s.Beat(e.ctx(), node, epoch), "Beat(%s, %d) of the current epoch must succeed", node, epoch)
}

// list returns the records of nodes, by node; every node appears at
// most once.
func (e *env) list(nodes ...string) map[string]heartbeat.Record {
	e.t.Helper()
	recs, err := e.s.List(e.ctx())
	require.NoError(e.t, err, "List must succeed")
	return pick(e.t, recs, nodes)
}

// pick returns the records of nodes in recs, failing if a node appears
// twice.
func pick(t *testing.T, recs []heartbeat.Record, nodes []string) map[string]heartbeat.Record {
	t.Helper()
	want := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		want[n] = true
	}
	out := make(map[string]heartbeat.Record)
	for _, r := range recs {
		if !want[r.Node] {
			continue // another scenario's or process's record
		}
		_, dup := out[r.Node]
		require.False(t, dup, "List must return at most one record per node; %s appears twice", r.Node)
		out[r.Node] = r
	}
	return out
}

// get returns node's record, failing if it is not listed.
func (e *env) get(node string) heartbeat.Record {
	e.t.Helper()
	r, ok := e.list(node)[node]
	require.True(e.t, ok, "List must include the record of %s", node)
	return r
}

// absent fails if node's record is listed.
func (e *env) absent(node, why string) {
	e.t.Helper()
	_, ok := e.list(node)[node]
	require.False(e.t, ok, "%s: List must not include %s", why, node)
}

// age lets at least d pass on the store's clock, with Advance or by
// waiting, and returns node's record once its age is at least d.
func (e *env) age(node string, d time.Duration) heartbeat.Record {
	e.t.Helper()
	if e.h.Advance != nil {
		e.h.Advance(e.t, d)
		r := e.get(node)
		require.GreaterOrEqual(e.t, r.Age, d, "after Advance(%s) the age of %s must be at least %s", d, node, d)
		return r
	}
	deadline := time.Now().Add(waitLimit)
	for {
		r := e.get(node)
		if r.Age >= d {
			return r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the age of %s by the store's clock is %s after %s of real time; it must grow to %s", node, r.Age, waitLimit, d)
		}
		time.Sleep(pollEvery)
	}
}

// isEvicted fails unless err matches heartbeat.ErrEvicted.
func isEvicted(t *testing.T, err error, msg string, args ...any) {
	t.Helper()
	require.ErrorIs(t, err, heartbeat.ErrEvicted, append([]any{msg}, args...)...)
}

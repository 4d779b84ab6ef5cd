package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/internal/rabbitcluster"
	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
)

// The chaos test's nemesis: a schedule of faults drawn from a seed, run
// one at a time on the fault harness (faultCluster), each after a
// healthy gap and followed by a recovery (every node serving, connected,
// and in every ring). A round is every single fault kind once, on a node
// drawn at random where it targets one, and one pair of kinds at once,
// in a random order; the short form runs one round, the long form
// rounds until its duration has passed.
//
// Two kinds reach into a node. db-slow delays one node's database link
// (100-300 ms each way, drawn per fault) for the hold. stall-pause has
// the owner of a VM the clients call stall its next VM operation after
// the hypervisor call, before the final write (refnode serve
// -test-hooks, POST /test/stall-vm-final-write), and pauses it there,
// once it logs the stall, past its eviction: the new owner serves the VM
// meanwhile, and the stalled write, whose hypervisor acted, fails after
// the resume and is journaled, to be repaired or dropped as stale.

// chaosKind is a kind of fault.
type chaosKind int

const (
	kindKill         chaosKind = iota // SIGKILL a node; a new process in its slot after the hold
	kindTerm                          // SIGTERM a node (it leaves in order); a new process after the hold
	kindPause                         // SIGSTOP a node past its eviction; SIGCONT
	kindBusCut                        // one node's broker link reset, and refused until the heal
	kindBusHole                       // one node's broker link blackholed (bytes stall)
	kindDBHole                        // one node's database link blackholed (its transactions stall, then go on)
	kindBusAll                        // every node's broker link reset
	kindDBCut                         // the database cut: every node's link reset
	kindDBSlow                        // one node's database link delayed each way
	kindStallPause                    // a VM's owner stalled after a hypervisor call, before the final write, and paused there
	kindBrokerKill                    // one broker node SIGKILLed; restarted after the hold (TestChaosBroker)
	kindBrokerStop                    // one broker node shut down gracefully; restarted after the hold (TestChaosBroker)
	kindBrokerFreeze                  // one broker node frozen (SIGSTOP) for the hold; thawed (TestChaosBroker)
)

// chaosKinds are the single kinds, in the order a round draws them.
var chaosKinds = []chaosKind{kindKill, kindTerm, kindPause, kindBusCut, kindBusHole, kindDBHole, kindBusAll, kindDBCut, kindDBSlow, kindStallPause}

// chaosBrokerKinds are the broker faults TestChaosBroker's rounds draw
// too, after chaosKinds. broker-stop is left out of the rounds: a
// stopped node's restart is as slow as a killed one's (45-75 s while the
// test loads the machine), CI's budget is tight, and TestBrokerFailover
// stops a broker node under load.
var chaosBrokerKinds = []chaosKind{kindBrokerKill, kindBrokerFreeze}

// broker reports whether the kind hits a broker node (drawn from the
// cluster's nodes), not a cloudbus node.
func (k chaosKind) broker() bool { return k >= kindBrokerKill && k <= kindBrokerFreeze }

// pairable reports whether the kind runs in a pair. A stall-pause does
// not: it waits for its node's stall before its pause, and its node is
// the owner of a VM, not drawn.
func (k chaosKind) pairable() bool { return k != kindStallPause }

// String names the kind; "kind(n)" for a value not defined here.
func (k chaosKind) String() string {
	switch k {
	case kindKill:
		return "sigkill"
	case kindTerm:
		return "sigterm"
	case kindPause:
		return "sigstop"
	case kindBusCut:
		return "bus-cut"
	case kindBusHole:
		return "bus-blackhole"
	case kindDBHole:
		return "db-blackhole"
	case kindBusAll:
		return "bus-cut-all"
	case kindDBCut:
		return "db-cut"
	case kindDBSlow:
		return "db-slow"
	case kindStallPause:
		return "stall-pause"
	case kindBrokerKill:
		return "broker-kill"
	case kindBrokerStop:
		return "broker-stop"
	case kindBrokerFreeze:
		return "broker-freeze"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// targeted reports whether the schedule draws a node for the kind. A
// stall-pause hits one node too: the owner of a VM the schedule draws.
func (k chaosKind) targeted() bool { return k <= kindDBHole || k == kindDBSlow }

// The nemesis's timing. The pause outlasts the eviction (default
// -evict-after 3 s, checked every 500 ms beat).
const (
	chaosGapMin, chaosGapMax   = 2 * time.Second, 4 * time.Second // healthy time before each fault
	chaosHoldMin, chaosHoldMax = 1 * time.Second, 6 * time.Second // how long a fault lasts
	chaosPauseMin              = 4 * time.Second                  // a pause's least hold
	chaosTermBound             = 30 * time.Second                 // a SIGTERMed node's exit
	chaosRecoverBound          = 60 * time.Second                 // every node serving and in every ring after a heal
	// chaosReconcileBound is one reconcile of refnode's default timing:
	// a ring copy that missed an event is set from the store once two
	// reads of it, a beat (500 ms) apart, differ alike, at the next
	// tick: 1.5 s at most; plus 500 ms for the test's polls, and 500 ms
	// for a store read a beat late (each read is a database round trip,
	// and the beat that follows a node's reconnect may come a beat after
	// the test saw it connected: CI measured 2.129 s once, after a
	// bus-cut, against the 2 s this bound was). Once every node serves,
	// connected, and the heartbeat store holds the records of the running
	// nodes and no other (a killed node's stays until its eviction),
	// every ring agrees within it.
	chaosReconcileBound = 2500 * time.Millisecond
	chaosStartBound     = 60 * time.Second // a new process healthy
	// A db-slow fault delays each direction of a node's database link by
	// a delay drawn in [chaosSlowMin, chaosSlowMax) plus a jitter in
	// [0, chaosSlowJitter): 100-300 ms each way, 200-600 ms per round
	// trip.
	chaosSlowMin, chaosSlowMax = 100 * time.Millisecond, 200 * time.Millisecond
	chaosSlowJitter            = 100 * time.Millisecond
	// A stall-pause arms its node's stall for the hold plus
	// chaosStallMargin, so the stall outlasts the pause and the final
	// write comes after the resume, and waits up to chaosStallTrigger
	// for the stall to hold a VM operation.
	chaosStallMargin  = 2 * time.Second
	chaosStallTrigger = 15 * time.Second
	// A broker-freeze holds its broker node frozen for a hold drawn in
	// [chaosFreezeMin, chaosFreezeMax): the other broker nodes see a
	// frozen node down after 12-14 s with the cluster's net_ticktime 10
	// (TestChaosBroker's doc), so a freeze is sometimes a stall only,
	// sometimes a node the cluster drops and takes back after the thaw.
	chaosFreezeMin, chaosFreezeMax = 6 * time.Second, 16 * time.Second
	// chaosBrokerBound bounds a broker node's restart or thaw and the
	// wait until the cluster runs every node again (a restart takes
	// about 12 s on a quiet machine, 45-70 s on the 2-core one under the
	// test's load, once more than 90 s; a node thawed after the others
	// dropped it pauses and comes back about 3 s after the thaw).
	chaosBrokerBound = 3 * time.Minute
)

// faultPart is one kind of a fault, on node (a slot index; -1 for every
// node, or for a stall-pause's node, the owner of VM vm at the time, or
// for a broker fault).
type faultPart struct {
	kind   chaosKind
	node   int
	broker int           // a broker fault's broker node, by index (0..2); -1 for another kind
	vm     int           // a stall-pause's VM, by index; -1 for another kind
	delay  time.Duration // a db-slow's delay each way, before its jitter
}

// chaosFault is one fault of the schedule: one kind, or two at once.
type chaosFault struct {
	parts     []faultPart
	gap, hold time.Duration
}

// Kind is the part's kind, or "double" for two at once.
func (f chaosFault) Kind() string {
	if len(f.parts) == 1 {
		return f.parts[0].kind.String()
	}
	return "double"
}

// String is "sigkill A", "bus-cut-all", "sigstop B + db-cut",
// "db-slow C (142-242ms each way)", "stall-pause (owner of vm 1)",
// "broker-kill R2" (broker node index 1, the script's node 2).
func (f chaosFault) String() string {
	var parts []string
	for _, p := range f.parts {
		s := p.kind.String()
		if p.node >= 0 {
			s += " " + string(rune('A'+p.node))
		}
		if p.broker >= 0 {
			s += fmt.Sprintf(" R%d", p.broker+1)
		}
		switch p.kind {
		case kindDBSlow:
			s += fmt.Sprintf(" (%d-%dms each way)", p.delay.Milliseconds(), (p.delay + chaosSlowJitter).Milliseconds())
		case kindStallPause:
			s += fmt.Sprintf(" (owner of vm %d)", p.vm)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " + ")
}

// chaosSchedule draws faults from a seed: the same seed, the same faults
// in the same order with the same gaps and holds.
type chaosSchedule struct {
	rng       *rand.Rand
	nodes     int
	brokers   int          // broker nodes; 0: no broker fault
	kinds     []chaosKind  // the single kinds of a round
	vms       int          // VMs a stall-pause draws from
	round     []chaosFault // what is left of the current round
	rounds    int          // rounds begun
	pairKinds []chaosKind  // the kinds a pair draws from
}

// newChaosSchedule draws the faults of nodes cloudbus nodes and their
// VMs; with brokers > 0 (TestChaosBroker), also the broker faults of a
// cluster of that many broker nodes, and each round's pair is then one
// broker fault and one fault of the cloudbus nodes (never two broker
// faults at once: the cluster keeps a majority). With brokers 0 a seed
// draws what it drew before the broker faults existed.
func newChaosSchedule(seed uint64, nodes, vms, brokers int) *chaosSchedule {
	s := &chaosSchedule{rng: rand.New(rand.NewPCG(seed, 0x6e656d65736973)), nodes: nodes, vms: vms, brokers: brokers}
	s.kinds = slices.Clone(chaosKinds)
	if brokers > 0 {
		s.kinds = append(s.kinds, chaosBrokerKinds...)
	}
	for _, k := range chaosKinds {
		if k.pairable() {
			s.pairKinds = append(s.pairKinds, k)
		}
	}
	return s
}

// next returns the next fault, beginning a round if need be.
func (s *chaosSchedule) next() chaosFault {
	if len(s.round) == 0 {
		s.round = s.newRound()
		s.rounds++
	}
	f := s.round[0]
	s.round = s.round[1:]
	return f
}

// roundDone reports whether the current round has been drawn whole.
func (s *chaosSchedule) roundDone() bool { return len(s.round) == 0 }

func (s *chaosSchedule) newRound() []chaosFault {
	var round []chaosFault
	for _, k := range s.kinds {
		round = append(round, s.plan(k))
	}
	if s.brokers > 0 {
		a := chaosBrokerKinds[s.rng.IntN(len(chaosBrokerKinds))]
		b := s.pairKinds[s.rng.IntN(len(s.pairKinds))]
		round = append(round, s.plan(a, b))
	} else {
		a := s.pairKinds[s.rng.IntN(len(s.pairKinds))]
		b := a
		for b == a {
			b = s.pairKinds[s.rng.IntN(len(s.pairKinds))]
		}
		round = append(round, s.plan(a, b))
	}
	s.rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
	return round
}

// plan draws the nodes (distinct), the gap and the hold of a fault.
func (s *chaosSchedule) plan(kinds ...chaosKind) chaosFault {
	f := chaosFault{gap: s.between(chaosGapMin, chaosGapMax)}
	used := map[int]bool{}
	least, most := chaosHoldMin, chaosHoldMax
	for _, k := range kinds {
		p := faultPart{kind: k, node: -1, broker: -1, vm: -1}
		if k.broker() {
			p.broker = s.rng.IntN(s.brokers)
		}
		if k.targeted() {
			for p.node < 0 || used[p.node] {
				p.node = s.rng.IntN(s.nodes)
			}
			used[p.node] = true
		}
		switch k {
		case kindPause, kindStallPause:
			least = max(least, chaosPauseMin)
		case kindDBSlow:
			p.delay = s.between(chaosSlowMin, chaosSlowMax)
		case kindBrokerFreeze:
			least, most = chaosFreezeMin, chaosFreezeMax
		}
		if k == kindStallPause {
			p.vm = s.rng.IntN(s.vms)
		}
		f.parts = append(f.parts, p)
	}
	f.hold = s.between(least, most)
	return f
}

// between draws a duration in [lo, hi), to the millisecond.
func (s *chaosSchedule) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)/int64(time.Millisecond)))*time.Millisecond
}

// chaosWindow is one fault as it ran: from its injection until every
// node was back in every ring.
type chaosWindow struct {
	fault         chaosFault
	start, healed time.Time
	brokerBack    time.Time      // a broker-freeze's: every broker node running in the cluster again (after healed)
	ready         time.Time      // every node serving and connected to the broker again
	recovered     time.Time      // and every ring agrees
	termExit      string         // a SIGTERMed node's exit, if not 0
	evictions     []string       // "A1 after 3.1s (stopped beating)" for each node hit that a peer evicted in the window
	killEvictions []killEviction // those of SIGKILLed nodes
	calls         map[string]int // image calls invoked in the window, by outcome
	slowest       time.Duration  // the longest of them
	stall         *chaosStall    // a stall-pause's stall
	slowed        []slowedLink   // a db-slow's link
}

// slowedLink is a node's database link slowed by a db-slow fault.
type slowedLink struct {
	node  string        // the UUID of the process
	delay time.Duration // the most each byte was held, each way
}

// slowedLinks is the linkSlack of the windows' db-slow faults: a
// commit by a slowed node from the injection until its most delayed
// bytes arrived after the heal may reach the database that much after
// the node sent it.
func slowedLinks(windows []chaosWindow) linkSlack {
	return func(node string, at time.Time) time.Duration {
		var d time.Duration
		for _, w := range windows {
			for _, l := range w.slowed {
				if l.node == node && !at.Before(w.start) && !at.After(w.healed.Add(l.delay)) {
					d = max(d, l.delay)
				}
			}
		}
		return d
	}
}

// chaosStall is what a stall-pause did: the stall armed on the owner of
// a VM, the operation it held, the pause.
type chaosStall struct {
	proc      *child
	node      string        // the label of the process stalled and paused
	vm        int           // the VM whose owner it was
	length    time.Duration // the stall armed (for=)
	armed     time.Time
	triggered bool      // an operation reached its final write and held
	held      string    // the UUID of the VM whose operation it held
	holding   time.Time // when the node logged "test stall: holding"
	paused    time.Time // SIGSTOP sent (zero: not paused)
	resumed   time.Time // SIGCONT about to be sent
	over      time.Time // when the node logged "test stall: over"; zero if not seen
}

// heldInPause reports whether the node was paused while it held the
// stalled operation: the pause after the hold began, its end logged
// after the resume.
func (s *chaosStall) heldInPause() bool {
	return s.triggered && !s.paused.IsZero() && s.paused.After(s.holding) && !s.over.IsZero() && !s.over.Before(s.resumed)
}

// contains reports whether at falls in the window.
func (w chaosWindow) contains(at time.Time) bool {
	return !at.Before(w.start) && !at.After(w.recovered)
}

// nemesis runs faults on a cluster. Only the test's goroutine uses it.
type nemesis struct {
	fc  *faultCluster // its processes run with -test-hooks
	vms []string      // the VMs the clients call, by index
	// rc is the broker cluster of TestChaosBroker, nil otherwise; down
	// holds its nodes a broker fault left stopped or frozen, by index,
	// for the cleanup (healBrokers).
	rc   *rabbitcluster.Cluster
	down map[int]chaosKind
	// restart is the restart of a killed or stopped broker node, running
	// in the background while the next faults of the cloudbus nodes go on
	// (a restart takes 10-70 s); nil when none runs. The next broker
	// fault, the end of the load and the cleanup wait for it first.
	restart *brokerRestart
}

// brokerRestart is a broker node's restart in the background.
type brokerRestart struct {
	node  int       // the broker node's index
	fault string    // the fault that stopped it
	began time.Time // the heal
	done  chan error
}

// restartBroker restarts broker node i in the background, after fault
// f: the nemesis's next faults do not wait for it.
func (m *nemesis) restartBroker(ctx context.Context, i int, f string) {
	r := &brokerRestart{node: i, fault: f, began: time.Now(), done: make(chan error, 1)}
	m.restart = r
	go func() { // owned by the nemesis: awaitRestart receives its result
		rctx, cancel := context.WithTimeout(ctx, chaosBrokerBound)
		defer cancel()
		err := m.rc.Restart(rctx, i)
		if err == nil {
			err = m.rc.WaitRunning(rctx, m.rc.Nodes())
		}
		r.done <- err
	}()
}

// awaitRestart waits for the broker node restarting in the background,
// if any, and logs how long its restart took.
func (m *nemesis) awaitRestart(t *testing.T) {
	t.Helper()
	r := m.restart
	if r == nil {
		return
	}
	m.restart = nil
	err := <-r.done // bounded by chaosBrokerBound
	require.NoError(t, err, "%s: broker node R%d restarted and runs in the cluster within %s", r.fault, r.node+1, chaosBrokerBound)
	delete(m.down, r.node)
	t.Logf("broker node R%d (%s) restarted and runs in the cluster %s after the heal, in the background",
		r.node+1, r.fault, time.Since(r.began).Round(time.Millisecond))
}

// healBrokers restarts the broker nodes a fault killed or stopped and
// thaws those it froze, and waits until the cluster runs every node:
// a test that failed in a broker fault leaves the cluster whole for
// the next one. The cleanup of TestChaosBroker.
func (m *nemesis) healBrokers(t *testing.T) {
	if r := m.restart; r != nil {
		m.restart = nil
		if err := <-r.done; err != nil {
			t.Logf("the restart of broker node R%d in the background: %v", r.node+1, err)
		}
	}
	if m.rc == nil || len(m.down) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), chaosBrokerBound)
	defer cancel()
	running, _ := m.rc.Running(ctx)
	for _, i := range slices.Sorted(maps.Keys(m.down)) {
		switch {
		case m.down[i] == kindBrokerFreeze:
			assert.NoError(t, m.rc.Thaw(ctx, i), "thaw broker node R%d", i+1)
		case !slices.Contains(running, i): // a restart cut short may have started it
			assert.NoError(t, m.rc.Restart(ctx, i), "restart broker node R%d", i+1)
		}
		delete(m.down, i)
	}
	assert.NoError(t, m.rc.WaitRunning(ctx, m.rc.Nodes()), "every broker node runs again")
}

// brokerFault injects a broker fault on broker node i, once a restart
// in the background is over (one broker node down at a time), and
// returns its heal, which thaws the node or starts its restart in the
// background.
func (m *nemesis) brokerFault(t *testing.T, ctx context.Context, f chaosFault, k chaosKind, i int) func() {
	t.Helper()
	require.NotNil(t, m.rc, "%s needs the broker cluster (TestChaosBroker)", k)
	m.awaitRestart(t)
	bctx, cancel := context.WithTimeout(ctx, chaosBrokerBound)
	defer cancel()
	m.down[i] = k
	switch k {
	case kindBrokerKill:
		require.NoError(t, m.rc.Kill(bctx, i), "kill broker node R%d", i+1)
	case kindBrokerStop:
		require.NoError(t, m.rc.StopNode(bctx, i), "stop broker node R%d", i+1)
	case kindBrokerFreeze:
		require.NoError(t, m.rc.Freeze(bctx, i), "freeze broker node R%d", i+1)
	}
	return func() {
		if k != kindBrokerFreeze {
			m.restartBroker(ctx, i, f.String())
			return
		}
		hctx, cancel := context.WithTimeout(ctx, chaosBrokerBound)
		defer cancel()
		require.NoError(t, m.rc.Thaw(hctx, i), "thaw broker node R%d", i+1)
		delete(m.down, i)
	}
}

// startNode starts a new process in slot n, with the slot's flags, and
// waits until it is healthy.
func (m *nemesis) startNode(t *testing.T, ctx context.Context, n *faultNode) {
	t.Helper()
	n.start(t)
	sctx, cancel := context.WithTimeout(ctx, chaosStartBound)
	defer cancel()
	require.NoError(t, n.Proc().awaitHealthy(sctx), "node %s", n.Label())
}

// run waits out the fault's gap, injects it, holds it, heals it (links
// first, then paused nodes, then new processes for stopped ones) and
// waits until every node is back in every ring.
func (m *nemesis) run(t *testing.T, ctx context.Context, f chaosFault) chaosWindow {
	t.Helper()
	sleepUntil(ctx, time.Now().Add(f.gap))
	w := chaosWindow{fault: f, start: time.Now()}
	holdFrom := w.start
	nodes := m.fc.Nodes()
	// Heals by phase: links and broker nodes, then paused nodes, then
	// new processes for stopped ones.
	var heals [3][]func()
	brokerHit := false // a broker node thawed: wait until the cluster runs it again
	type target struct {
		c    *child
		slot int
	}
	hit := map[int]target{} // the process each part on one node hit, by part
	for i, p := range f.parts {
		if p.node >= 0 {
			hit[i] = target{nodes[p.node].Proc(), p.node}
		}
	}
	for i, p := range f.parts {
		switch p.kind {
		case kindBrokerKill, kindBrokerStop, kindBrokerFreeze:
			heals[0] = append(heals[0], m.brokerFault(t, ctx, f, p.kind, p.broker))
			brokerHit = brokerHit || p.kind == kindBrokerFreeze
		case kindKill:
			n := nodes[p.node]
			n.Kill(t)
			heals[2] = append(heals[2], func() { m.startNode(t, ctx, n) })
		case kindTerm:
			n := nodes[p.node]
			w.termExit = m.term(t, n, len(f.parts) == 1)
			heals[2] = append(heals[2], func() { m.startNode(t, ctx, n) })
		case kindPause:
			n := nodes[p.node]
			n.Pause(t)
			heals[1] = append(heals[1], func() { n.Resume(t) })
		case kindBusCut:
			nodes[p.node].CutBus()
			heals[0] = append(heals[0], nodes[p.node].HealBus)
		case kindBusHole:
			nodes[p.node].StallBus()
			heals[0] = append(heals[0], nodes[p.node].HealBus)
		case kindDBHole:
			nodes[p.node].DB.Stall()
			heals[0] = append(heals[0], nodes[p.node].DB.Heal)
		case kindBusAll:
			for _, n := range nodes {
				n.CutBus()
				heals[0] = append(heals[0], n.HealBus)
			}
		case kindDBCut:
			for _, n := range nodes {
				n.DB.Cut()
				heals[0] = append(heals[0], n.DB.Heal)
			}
		case kindDBSlow:
			l := proxy.Latency{Delay: p.delay, Jitter: chaosSlowJitter}
			nodes[p.node].DB.SetLatency(l, l)
			w.slowed = append(w.slowed, slowedLink{node: nodes[p.node].ID(), delay: p.delay + chaosSlowJitter})
			heals[0] = append(heals[0], nodes[p.node].DB.Heal)
		case kindStallPause:
			slot, st := m.stallPause(t, ctx, p.vm, f.hold)
			n := nodes[slot]
			hit[i] = target{n.Proc(), slot}
			w.stall, holdFrom = st, st.paused
			heals[1] = append(heals[1], func() {
				st.resumed = time.Now()
				n.Resume(t)
			})
		}
	}
	sleepUntil(ctx, holdFrom.Add(f.hold))
	for _, phase := range heals {
		for _, heal := range phase {
			heal()
		}
	}
	w.healed = time.Now()
	if brokerHit {
		bctx, cancel := context.WithTimeout(ctx, chaosBrokerBound)
		require.NoError(t, m.rc.WaitRunning(bctx, m.rc.Nodes()), "%s: every broker node runs in the cluster within %s of the heal", f, chaosBrokerBound)
		cancel()
		w.brokerBack = time.Now()
	}
	rctx, cancel := context.WithTimeout(ctx, chaosRecoverBound)
	defer cancel()
	require.NoError(t, poll(rctx, func() error {
		if err := serving(m.fc); err != nil {
			return err
		}
		return inStore(rctx, m.fc)
	}), "%s: every node serving and connected, and the store's records those of the running nodes, within %s of the heal", f, chaosRecoverBound)
	w.ready = time.Now()
	require.NoError(t, poll(rctx, m.fc.Agreed), "%s: every node back in every ring within %s of the heal", f, chaosRecoverBound)
	w.recovered = time.Now()
	assert.LessOrEqual(t, w.recovered.Sub(w.ready), chaosReconcileBound,
		"%s: every ring agrees within one reconcile (%s) of every node serving and connected", f, chaosReconcileBound)
	for i, p := range f.parts {
		h, ok := hit[i]
		if !ok {
			continue
		}
		c := h.c
		var peers []*child
		for j, n := range nodes {
			if j != h.slot {
				peers = append(peers, n.runs...)
			}
		}
		at, line, ok := evictedAt(peers, c.id, w.start, w.recovered)
		if ok {
			rule := evictionRule(line)
			w.evictions = append(w.evictions, fmt.Sprintf("%s after %s (%s)", c.label, at.Sub(w.start).Round(10*time.Millisecond), rule))
			switch {
			case p.kind == kindKill:
				w.killEvictions = append(w.killEvictions, killEviction{after: at.Sub(w.start), rule: rule})
			case p.kind == kindTerm:
				// Its process exits, so its session ends: a leave that
				// did not complete (the broker cut or frozen) may end in
				// an eviction by the free lock, which is right.
			case len(f.parts) == 1:
				// A live process keeps its database session: the free
				// lock's fast path is for the dead alone.
				assert.NotEqual(t, ruleSession, rule, "%s: the live node %s was evicted by its free session lock: %s", f, c.label, line)
			}
		}
		if (p.kind == kindPause || p.kind == kindStallPause) && len(f.parts) == 1 {
			assert.True(t, ok, "%s: the paused node %s was evicted while it was stopped (hold %s, past the eviction)", f, c.label, f.hold)
		}
	}
	if st := w.stall; st != nil && st.triggered {
		// The stall's end, logged once the node went on after the resume.
		for _, l := range st.proc.logLines("test stall: over", "vm="+st.held) {
			if !l.At.Before(st.holding) {
				st.over = l.At
				break
			}
		}
	}
	return w
}

// stallPause arms the stall of the owner of VM vm, on the ring of the
// running nodes, for hold + chaosStallMargin; waits until the node logs
// that it holds an operation's final write (up to chaosStallTrigger:
// else it disarms the stall and pauses the node all the same) and
// pauses it (SIGSTOP). It returns the node's slot and the stall; the
// caller holds the pause for hold and resumes the node.
func (m *nemesis) stallPause(t *testing.T, ctx context.Context, vm int, hold time.Duration) (int, *chaosStall) {
	t.Helper()
	owner := mustOwner(t, ringOver(t, idsOf(m.fc.Running())), m.vms[vm])
	slot := slices.IndexFunc(m.fc.Nodes(), func(n *faultNode) bool { return n.ID() == owner })
	require.GreaterOrEqual(t, slot, 0, "the owner %s of vm %d runs", owner, vm)
	n := m.fc.Node(slot)
	c := n.Proc()
	st := &chaosStall{proc: c, node: c.label, vm: vm, length: hold + chaosStallMargin}
	from := c.stderrSize()
	st.armed = time.Now()
	require.NoError(t, armStall(c, st.length), "arm the stall of node %s", c.label)
	wctx, cancel := context.WithTimeout(ctx, chaosStallTrigger)
	err := poll(wctx, func() error {
		ls := c.logLinesFrom(from, "test stall: holding")
		if len(ls) == 0 {
			return fmt.Errorf("node %s holds no VM operation yet", c.label)
		}
		vm := logAttr(ls[0].Text, "vm")
		if len(c.logLinesFrom(from, "test stall: over", "vm="+vm)) > 0 {
			// Its call's deadline ended the stall already (CI once saw
			// it end within the 15 ms before the pause): arm it again,
			// for an operation the pause will find held.
			from = c.stderrSize()
			if err := armStall(c, st.length); err != nil {
				return err
			}
			return fmt.Errorf("node %s's stall of vm %s ended before the pause; armed again", c.label, vm)
		}
		st.triggered, st.held, st.holding = true, vm, ls[0].At
		return nil
	})
	cancel()
	if err != nil {
		require.NoError(t, armStall(c, 0), "disarm the stall of node %s", c.label)
		if ls := c.logLinesFrom(from, "test stall: holding"); len(ls) > 0 { // it held at the last moment
			st.triggered, st.held, st.holding = true, logAttr(ls[0].Text, "vm"), ls[0].At
		} else {
			t.Logf("stall-pause: node %s held no VM operation within %s of the arming; pausing it all the same", c.label, chaosStallTrigger)
		}
	}
	n.Pause(t)
	st.paused = time.Now()
	return slot, st
}

// armStall arms node c's stall of its next VM operation's final write
// for d (0 disarms): refnode serve -test-hooks.
func armStall(c *child, d time.Duration) error {
	resp, err := httpClient.Post(c.admin+"/test/stall-vm-final-write?for="+d.String(), "text/plain", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /test/stall-vm-final-write?for=%s: %s: %s", d, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// serving reports whether every running node serves, unfenced (its
// heartbeat goes through), and is connected to the broker, whatever its
// ring.
func serving(fc *faultCluster) error {
	for _, c := range fc.Running() {
		st, err := c.status()
		if err != nil {
			return err
		}
		if st.State != "serving" || st.LeaseExpired || st.Transport != "connected" {
			return fmt.Errorf("node %s is %s (lease expired %t), transport %s", c.label, st.State, st.LeaseExpired, st.Transport)
		}
	}
	return nil
}

// inStore reports whether the heartbeat store holds a record of every
// running node and of no other: a killed node's record stays until its
// peers evict it, whatever the rings say.
func inStore(ctx context.Context, fc *faultCluster) error {
	rows, err := fc.tables.db.QueryContext(ctx, `SELECT node FROM "`+fc.tables.base+`_heartbeat" ORDER BY node`)
	if err != nil {
		return fmt.Errorf("read the heartbeat store: %w", err)
	}
	defer rows.Close()
	var stored []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("read the heartbeat store: %w", err)
		}
		stored = append(stored, id)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the heartbeat store: %w", err)
	}
	var running []string
	for _, c := range fc.Running() {
		running = append(running, c.id)
	}
	slices.Sort(running)
	if !slices.Equal(stored, running) {
		return fmt.Errorf("the heartbeat store holds %v, the running nodes are %v", stored, running)
	}
	return nil
}

// evictedAt returns when one of peers first logged that it evicted node
// id, within [from, to], and that log line.
func evictedAt(peers []*child, id string, from, to time.Time) (time.Time, string, bool) {
	var first logLine
	for _, c := range peers {
		for _, l := range c.logLines("heartbeat: evicted a node", id) {
			if !l.At.Before(from) && !l.At.After(to) && (first.At.IsZero() || l.At.Before(first.At)) {
				first = l
			}
		}
	}
	return first.At, first.Text, !first.At.IsZero()
}

// The eviction rules, as the heartbeat monitor's log lines name them.
const (
	ruleSession = "session lock free"
	ruleBus     = "cut off from the bus"
	ruleBeats   = "stopped beating"
)

// evictionRule names the rule of a heartbeat monitor's eviction line.
func evictionRule(line string) string {
	switch {
	case strings.Contains(line, "database session ended"):
		return ruleSession
	case strings.Contains(line, "cut off from the bus"):
		return ruleBus
	default:
		return ruleBeats
	}
}

// killEviction is the eviction of a SIGKILLed node: how long after the
// kill, and by which rule.
type killEviction struct {
	after time.Duration
	rule  string
}

// term SIGTERMs node n and waits for its exit. Alone, the node must
// leave in order and exit 0; with another fault at once (the database
// or the broker may be cut) its exit status is only reported. A node
// that does not exit within chaosTermBound fails the test and is killed.
func (m *nemesis) term(t *testing.T, n *faultNode, alone bool) string {
	t.Helper()
	c := n.Proc()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	if err := c.wait("SIGTERM", chaosTermBound); err != nil {
		t.Errorf("%v; killing it", err)
		n.Kill(t)
		return "killed: no exit within " + chaosTermBound.String()
	}
	if alone {
		_, errOut := c.output()
		assert.NoError(t, c.waitErr, "node %s exits 0 after SIGTERM; stderr:\n%s", c.label, tail(errOut, 2000))
	}
	if c.waitErr != nil {
		return c.waitErr.Error()
	}
	return ""
}

// TestChaosSchedule: one seed gives one schedule; a round holds every
// kind once and a pair at once on distinct nodes, with gaps and holds
// within their bounds and a pause that outlasts the eviction. With
// broker nodes (TestChaosBroker), a round holds the broker kinds too,
// each on one broker node, and its pair is one broker fault and one
// fault of the cloudbus nodes.
func TestChaosSchedule(t *testing.T) {
	for _, brokers := range []int{0, 3} {
		t.Run(fmt.Sprintf("brokers=%d", brokers), func(t *testing.T) { testChaosSchedule(t, brokers) })
	}
	// The broker faults change nothing of a schedule without them.
	a, b := newChaosSchedule(42, 3, 3, 0), newChaosSchedule(42, 3, 3, 0)
	for range 3 * (len(chaosKinds) + 1) {
		assert.Equal(t, a.next(), b.next())
	}
	assert.Equal(t, "sigstop B + db-cut", chaosFault{parts: []faultPart{{kind: kindPause, node: 1, broker: -1, vm: -1}, {kind: kindDBCut, node: -1, broker: -1, vm: -1}}}.String())
	assert.Equal(t, "db-slow C (142-242ms each way)", chaosFault{parts: []faultPart{{kind: kindDBSlow, node: 2, broker: -1, vm: -1, delay: 142 * time.Millisecond}}}.String())
	assert.Equal(t, "stall-pause (owner of vm 1)", chaosFault{parts: []faultPart{{kind: kindStallPause, node: -1, broker: -1, vm: 1}}}.String())
	assert.Equal(t, "broker-freeze R2 + sigkill A", chaosFault{parts: []faultPart{{kind: kindBrokerFreeze, node: -1, broker: 1, vm: -1}, {kind: kindKill, node: 0, broker: -1, vm: -1}}}.String())
	assert.Equal(t, "kind(14)", chaosKind(14).String())
	assert.True(t, slices.IsSorted(chaosKinds))
	assert.True(t, slices.IsSorted(chaosBrokerKinds))
	for _, k := range chaosKinds {
		assert.False(t, k.broker(), "%s", k)
	}
}

func testChaosSchedule(t *testing.T, brokers int) {
	kinds := slices.Clone(chaosKinds)
	if brokers > 0 {
		kinds = append(kinds, chaosBrokerKinds...)
	}
	draw := func(seed uint64) []string {
		s := newChaosSchedule(seed, 3, 3, brokers)
		var out []string
		for range 2 * (len(kinds) + 1) {
			f := s.next()
			out = append(out, fmt.Sprintf("%s gap %s hold %s", f, f.gap, f.hold))
		}
		assert.True(t, s.roundDone())
		assert.Equal(t, 2, s.rounds)
		return out
	}
	assert.Equal(t, draw(42), draw(42), "the same seed, the same schedule")
	assert.NotEqual(t, draw(42), draw(43))

	s := newChaosSchedule(7, 3, 3, brokers)
	for range 20 {
		seen := map[string]int{}
		for {
			f := s.next()
			seen[f.Kind()]++
			assert.GreaterOrEqual(t, f.gap, chaosGapMin)
			assert.Less(t, f.gap, chaosGapMax)
			least, most := chaosHoldMin, chaosHoldMax
			var nodes []int
			brokerParts := 0
			for _, p := range f.parts {
				if p.kind == kindPause || p.kind == kindStallPause {
					assert.GreaterOrEqual(t, f.hold, chaosPauseMin, "a pause outlasts the eviction")
				}
				if p.kind == kindBrokerFreeze {
					least, most = chaosFreezeMin, chaosFreezeMax
				}
				assert.Equal(t, p.kind.targeted(), p.node >= 0, "%s", f)
				assert.Equal(t, p.kind.broker(), p.broker >= 0, "%s: a broker fault, and only it, draws a broker node", f)
				assert.Less(t, p.broker, brokers)
				if p.kind.broker() {
					brokerParts++
				}
				assert.Equal(t, p.kind == kindStallPause, p.vm >= 0, "%s: a stall-pause, and only it, draws a VM", f)
				assert.Less(t, p.vm, 3)
				if p.kind == kindDBSlow {
					assert.GreaterOrEqual(t, p.delay, chaosSlowMin)
					assert.Less(t, p.delay, chaosSlowMax)
				} else {
					assert.Zero(t, p.delay)
				}
				if p.node >= 0 {
					assert.NotContains(t, nodes, p.node, "%s: distinct nodes", f)
					nodes = append(nodes, p.node)
				}
			}
			assert.GreaterOrEqual(t, f.hold, least, "%s", f)
			assert.Less(t, f.hold, most, "%s", f)
			assert.LessOrEqual(t, brokerParts, 1, "%s: one broker node down at a time", f)
			if f.Kind() == "double" {
				require.Len(t, f.parts, 2)
				assert.NotEqual(t, f.parts[0].kind, f.parts[1].kind)
				for _, p := range f.parts {
					assert.True(t, p.kind.pairable(), "%s: a stall-pause runs alone", f)
				}
				if brokers > 0 {
					assert.Equal(t, 1, brokerParts, "%s: a broker fault and a fault of the cloudbus nodes", f)
				}
			}
			if s.roundDone() {
				break
			}
		}
		for _, k := range kinds {
			assert.Equal(t, 1, seen[k.String()], "every kind once a round")
		}
		assert.Equal(t, 1, seen["double"])
		assert.Len(t, seen, len(kinds)+1)
	}
}

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The chaos test's nemesis: a schedule of faults drawn from a seed, run
// one at a time on the fault harness (faultCluster), each after a
// healthy gap and followed by a recovery (every node serving, connected,
// and in every ring). A round is every single fault kind once, on a node
// drawn at random where it targets one, and one pair of kinds at once,
// in a random order; the short form runs one round, the long form
// rounds until its duration has passed.

// chaosKind is a kind of fault.
type chaosKind int

const (
	kindKill    chaosKind = iota // SIGKILL a node; a new process in its slot after the hold
	kindTerm                     // SIGTERM a node (it leaves in order); a new process after the hold
	kindPause                    // SIGSTOP a node past its eviction; SIGCONT
	kindBusCut                   // one node's broker link reset, and refused until the heal
	kindBusHole                  // one node's broker link blackholed (bytes stall)
	kindDBHole                   // one node's database link blackholed (its transactions stall, then go on)
	kindBusAll                   // every node's broker link reset
	kindDBCut                    // the database cut: every node's link reset
)

// chaosKinds are the single kinds, in the order a round draws them.
var chaosKinds = []chaosKind{kindKill, kindTerm, kindPause, kindBusCut, kindBusHole, kindDBHole, kindBusAll, kindDBCut}

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
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// targeted reports whether the kind hits one node.
func (k chaosKind) targeted() bool { return k <= kindDBHole }

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
	// tick: 1.5 s at most; plus 500 ms for the test's polls. Once every
	// node serves, connected, and the heartbeat store holds the records
	// of the running nodes and no other (a killed node's stays until its
	// eviction), every ring agrees within it.
	chaosReconcileBound = 2 * time.Second
	chaosStartBound     = 60 * time.Second // a new process healthy
)

// faultPart is one kind of a fault, on node (a slot index; -1 for every
// node).
type faultPart struct {
	kind chaosKind
	node int
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

// String is "sigkill A", "bus-cut-all", "sigstop B + db-cut".
func (f chaosFault) String() string {
	var parts []string
	for _, p := range f.parts {
		s := p.kind.String()
		if p.node >= 0 {
			s += " " + string(rune('A'+p.node))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " + ")
}

// chaosSchedule draws faults from a seed: the same seed, the same faults
// in the same order with the same gaps and holds.
type chaosSchedule struct {
	rng    *rand.Rand
	nodes  int
	round  []chaosFault // what is left of the current round
	rounds int          // rounds begun
}

func newChaosSchedule(seed uint64, nodes int) *chaosSchedule {
	return &chaosSchedule{rng: rand.New(rand.NewPCG(seed, 0x6e656d65736973)), nodes: nodes}
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
	for _, k := range chaosKinds {
		round = append(round, s.plan(k))
	}
	a := chaosKinds[s.rng.IntN(len(chaosKinds))]
	b := a
	for b == a {
		b = chaosKinds[s.rng.IntN(len(chaosKinds))]
	}
	round = append(round, s.plan(a, b))
	s.rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
	return round
}

// plan draws the nodes (distinct), the gap and the hold of a fault.
func (s *chaosSchedule) plan(kinds ...chaosKind) chaosFault {
	f := chaosFault{gap: s.between(chaosGapMin, chaosGapMax)}
	used := map[int]bool{}
	least := chaosHoldMin
	for _, k := range kinds {
		p := faultPart{kind: k, node: -1}
		if k.targeted() {
			for p.node < 0 || used[p.node] {
				p.node = s.rng.IntN(s.nodes)
			}
			used[p.node] = true
		}
		if k == kindPause {
			least = chaosPauseMin
		}
		f.parts = append(f.parts, p)
	}
	f.hold = s.between(least, chaosHoldMax)
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
	ready         time.Time      // every node serving and connected to the broker again
	recovered     time.Time      // and every ring agrees
	termExit      string         // a SIGTERMed node's exit, if not 0
	evictions     []string       // "A1 after 3.1s" for each node hit that a peer evicted in the window
	calls         map[string]int // calls invoked in the window, by outcome
	slowest       time.Duration  // the longest of them
}

// contains reports whether at falls in the window.
func (w chaosWindow) contains(at time.Time) bool {
	return !at.Before(w.start) && !at.After(w.recovered)
}

// nemesis runs faults on a cluster. Only the test's goroutine uses it.
type nemesis struct {
	fc    *faultCluster
	flags []string // refnode serve flags of every new process
}

// startNode starts a new process in slot n and waits until it is
// healthy.
func (m *nemesis) startNode(t *testing.T, ctx context.Context, n *faultNode) {
	t.Helper()
	startWithFlags(t, n, m.flags...)
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
	nodes := m.fc.Nodes()
	var heals [3][]func()
	hit := map[faultPart]*child{} // the process each targeted part hit
	for _, p := range f.parts {
		if p.node >= 0 {
			hit[p] = nodes[p.node].Proc()
		}
	}
	for _, p := range f.parts {
		switch p.kind {
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
			nodes[p.node].Bus.Cut()
			heals[0] = append(heals[0], nodes[p.node].Bus.Heal)
		case kindBusHole:
			nodes[p.node].Bus.Stall()
			heals[0] = append(heals[0], nodes[p.node].Bus.Heal)
		case kindDBHole:
			nodes[p.node].DB.Stall()
			heals[0] = append(heals[0], nodes[p.node].DB.Heal)
		case kindBusAll:
			for _, n := range nodes {
				n.Bus.Cut()
				heals[0] = append(heals[0], n.Bus.Heal)
			}
		case kindDBCut:
			for _, n := range nodes {
				n.DB.Cut()
				heals[0] = append(heals[0], n.DB.Heal)
			}
		}
	}
	sleepUntil(ctx, w.start.Add(f.hold))
	for _, phase := range heals {
		for _, heal := range phase {
			heal()
		}
	}
	w.healed = time.Now()
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
	for _, p := range f.parts {
		c := hit[p]
		if c == nil {
			continue
		}
		var peers []*child
		for i, n := range nodes {
			if i != p.node {
				peers = append(peers, n.runs...)
			}
		}
		at, ok := evictedAt(peers, c.id, w.start, w.recovered)
		if ok {
			w.evictions = append(w.evictions, fmt.Sprintf("%s after %s", c.label, at.Sub(w.start).Round(10*time.Millisecond)))
		}
		if p.kind == kindPause && len(f.parts) == 1 {
			assert.True(t, ok, "%s: the paused node %s was evicted while it was stopped (hold %s, past the eviction)", f, c.label, f.hold)
		}
	}
	return w
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
		if st.State != "serving" || st.Fenced || st.Transport != "connected" {
			return fmt.Errorf("node %s is %s (fenced %t), transport %s", c.label, st.State, st.Fenced, st.Transport)
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
// id, within [from, to].
func evictedAt(peers []*child, id string, from, to time.Time) (time.Time, bool) {
	var first time.Time
	for _, c := range peers {
		for _, l := range c.logLines("evicted a node", id) {
			if !l.At.Before(from) && !l.At.After(to) && (first.IsZero() || l.At.Before(first)) {
				first = l.At
			}
		}
	}
	return first, !first.IsZero()
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
// within their bounds and a pause that outlasts the eviction.
func TestChaosSchedule(t *testing.T) {
	draw := func(seed uint64) []string {
		s := newChaosSchedule(seed, 3)
		var out []string
		for range 2 * (len(chaosKinds) + 1) {
			f := s.next()
			out = append(out, fmt.Sprintf("%s gap %s hold %s", f, f.gap, f.hold))
		}
		assert.True(t, s.roundDone())
		assert.Equal(t, 2, s.rounds)
		return out
	}
	assert.Equal(t, draw(42), draw(42), "the same seed, the same schedule")
	assert.NotEqual(t, draw(42), draw(43))

	s := newChaosSchedule(7, 3)
	for range 20 {
		kinds := map[string]int{}
		for {
			f := s.next()
			kinds[f.Kind()]++
			assert.GreaterOrEqual(t, f.gap, chaosGapMin)
			assert.Less(t, f.gap, chaosGapMax)
			assert.GreaterOrEqual(t, f.hold, chaosHoldMin)
			assert.Less(t, f.hold, chaosHoldMax)
			var nodes []int
			for _, p := range f.parts {
				if p.kind == kindPause {
					assert.GreaterOrEqual(t, f.hold, chaosPauseMin, "a pause outlasts the eviction")
				}
				assert.Equal(t, p.kind.targeted(), p.node >= 0, "%s", f)
				if p.node >= 0 {
					assert.NotContains(t, nodes, p.node, "%s: distinct nodes", f)
					nodes = append(nodes, p.node)
				}
			}
			if f.Kind() == "double" {
				require.Len(t, f.parts, 2)
				assert.NotEqual(t, f.parts[0].kind, f.parts[1].kind)
			}
			if s.roundDone() {
				break
			}
		}
		for _, k := range chaosKinds {
			assert.Equal(t, 1, kinds[k.String()], "every kind once a round")
		}
		assert.Equal(t, 1, kinds["double"])
	}
	assert.Equal(t, "sigstop B + db-cut", chaosFault{parts: []faultPart{{kindPause, 1}, {kindDBCut, -1}}}.String())
	assert.Equal(t, "kind(9)", chaosKind(9).String())
	assert.True(t, slices.IsSorted(chaosKinds))
}

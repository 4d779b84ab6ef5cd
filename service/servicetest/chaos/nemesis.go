package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

// Fault is a kind of fault a [Nemesis] injects into one node.
type Fault int

// The faults.
const (
	// Kill crashes the node ([servicetest.Cluster.Kill]); when the fault
	// ends a new node is started in its place ([servicetest.Cluster.Add]).
	Kill Fault = iota + 1
	// Stop closes the node in order ([servicetest.Cluster.Stop]); when the
	// fault ends a new node is started in its place.
	Stop
	// StopHeartbeat cuts the node off from the heartbeat store while the
	// fault lasts ([servicetest.Cluster.StopHeartbeat]).
	StopHeartbeat
	// Partition cuts the node off from the bus while the fault lasts
	// ([servicetest.Cluster.Partition]).
	Partition
	// Drop silently loses the node's bus traffic while the fault lasts
	// ([servicetest.Cluster.Drop]).
	Drop
	// Pause freezes the node while the fault lasts, its handlers held
	// just before they run and its heartbeat stopped
	// ([servicetest.Cluster.Pause]); the held handlers run when it ends,
	// usually after the peers evicted the node.
	Pause
	// StoreOutage cuts every live node off from the heartbeat store while
	// the fault lasts, as a database outage does; it is drawn only while
	// no other fault is on.
	StoreOutage
	// ClockOffset steps the node's clock ahead or behind (at random, by
	// [Nemesis].Offset on average) while the fault lasts, and back when it
	// ends ([servicetest.Cluster.ClockOffset]).
	ClockOffset
)

// AllFaults returns every kind of fault.
func AllFaults() []Fault {
	return []Fault{Kill, Stop, StopHeartbeat, Partition, Drop, Pause, StoreOutage, ClockOffset}
}

// String returns the fault's name: "kill", "stop", "stop-heartbeat",
// "partition", "drop", "pause", "store-outage", "clock-offset", or
// "Fault(n)".
func (f Fault) String() string {
	switch f {
	case Kill:
		return "kill"
	case Stop:
		return "stop"
	case StopHeartbeat:
		return "stop-heartbeat"
	case Partition:
		return "partition"
	case Drop:
		return "drop"
	case Pause:
		return "pause"
	case StoreOutage:
		return "store-outage"
	case ClockOffset:
		return "clock-offset"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Nemesis injects faults into a servicetest cluster at random, from a
// seed: the same seed draws the same sequence (when, which fault, for how
// long, and a number that picks the node among the live ones free of a
// fault, in start order); which node that is, and whether a draw is
// skipped, depend on the cluster's state at that instant, which the
// clients' timing shapes too. Several faults may run at once, on
// different nodes. Set the fields, then call [Nemesis.Run]; every zero
// field takes a default.
type Nemesis struct {
	// Cluster is the cluster to hurt. Required.
	Cluster *servicetest.Cluster
	// Seed seeds the schedule. Default: drawn from the clock;
	// [NemesisReport].Seed says which, to run the schedule again.
	Seed uint64
	// Faults are the kinds to draw from, in rounds: each kind once per
	// round, in a shuffled order (a draw skipped is drawn again next; a
	// store outage drawn while another fault is on lets the next kind go
	// first), so that a run of len(Faults) faults injects every kind.
	// Default [AllFaults].
	Faults []Fault
	// Every is the mean time between the starts of two faults, each gap
	// drawn from [Every/2, 3·Every/2]. Default twice the cluster's
	// EvictAfter.
	Every time.Duration
	// Hold is the mean time a fault lasts, drawn from [Hold/2,
	// 3·Hold/2]. Default twice the cluster's EvictAfter: most faults last
	// long enough for the peers to evict the node.
	Hold time.Duration
	// Offset is the mean size of a ClockOffset fault's step, drawn from
	// [Offset/2, 3·Offset/2], ahead or behind. Default twice the
	// cluster's EvictAfter.
	Offset time.Duration
	// MaxDown is the most nodes under a fault at once; a fault drawn
	// while that many are is skipped. Default: a minority of the nodes
	// live at the start, at least 1.
	MaxDown int
	// Logf, optional, is told of each fault as it starts and ends (pass
	// t.Logf).
	Logf func(format string, args ...any)

	mu  sync.Mutex
	rep NemesisReport // so far, for Report
}

// Report returns what Run did so far: a test may run its clients until
// every kind was injected. It is safe to call while Run runs.
func (n *Nemesis) Report() NemesisReport {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := n.rep
	r.Injected = maps.Clone(n.rep.Injected)
	return r
}

// Covered reports whether every kind of faults (Faults, or AllFaults)
// was injected at least once.
func (r NemesisReport) Covered(faults []Fault) bool {
	if len(faults) == 0 {
		faults = AllFaults()
	}
	for _, f := range faults {
		if r.Injected[f] == 0 {
			return false
		}
	}
	return true
}

// NemesisReport is what a [Nemesis] did.
type NemesisReport struct {
	// Seed is the seed of the schedule.
	Seed uint64
	// Injected counts the faults injected, by kind.
	Injected map[Fault]int
	// Skipped counts the faults drawn but not injected: MaxDown nodes
	// were under a fault, or no live node was free.
	Skipped int
}

// String sums the report up: "seed 7: 12 faults (kill 3, ...), 2 skipped".
func (r NemesisReport) String() string {
	total := 0
	var kinds string
	for _, f := range AllFaults() {
		if n := r.Injected[f]; n > 0 {
			total += n
			if kinds != "" {
				kinds += ", "
			}
			kinds += fmt.Sprintf("%s %d", f, n)
		}
	}
	return fmt.Sprintf("seed %d: %d faults (%s), %d skipped", r.Seed, total, kinds, r.Skipped)
}

// Run injects faults until ctx ends, then ends the faults still on
// (restarting the nodes it killed or stopped) and returns once they
// ended. Its error reports a fault that could not be ended (a node that
// did not start in a killed one's place); ctx's end is not an error. Run
// it in its own goroutine beside the clients; inside a testing/synctest
// bubble its waits take virtual time.
func (n *Nemesis) Run(ctx context.Context) (NemesisReport, error) {
	c := n.Cluster
	if c == nil {
		return NemesisReport{}, errors.New("chaos: Nemesis.Cluster is nil; set it to the cluster to inject faults into")
	}
	live := c.Live()
	if len(live) == 0 {
		return NemesisReport{}, errors.New("chaos: the cluster has no live node to inject faults into")
	}
	evict := live[0].Heartbeat().EvictAfter
	seed := n.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	faults := n.Faults
	if len(faults) == 0 {
		faults = AllFaults()
	}
	every, hold, offset, maxDown := n.Every, n.Hold, n.Offset, n.MaxDown
	if every <= 0 {
		every = 2 * evict
	}
	if hold <= 0 {
		hold = 2 * evict
	}
	if offset <= 0 {
		offset = 2 * evict
	}
	if maxDown <= 0 {
		maxDown = max(1, (len(live)-1)/2)
	}
	logf := n.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	around := func(d time.Duration) time.Duration { return d/2 + time.Duration(rng.Int64N(int64(d)+1)) }

	rep := NemesisReport{Seed: seed, Injected: map[Fault]int{}}
	publish := func() { // rep as Report returns it; under mu
		n.mu.Lock()
		n.rep = rep
		n.rep.Injected = maps.Clone(rep.Injected)
		n.mu.Unlock()
	}
	publish()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		down = map[string]bool{} // nodes under a fault
		errs []error
	)
	stop := make(chan struct{}) // closed when ctx ends: every fault ends at once
	var bag []Fault             // the kinds not drawn yet in this round, shuffled
	for k := 1; ; k++ {
		gap := around(every)
		if len(bag) == 0 {
			bag = slices.Clone(faults)
			rng.Shuffle(len(bag), func(i, j int) { bag[i], bag[j] = bag[j], bag[i] })
		}
		pick, lasts := rng.Uint64(), around(hold)
		step := around(offset) // a ClockOffset's
		if rng.IntN(2) == 0 {
			step = -step
		}
		t := time.NewTimer(gap)
		select {
		case <-ctx.Done():
			t.Stop()
			close(stop)
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			return rep, errors.Join(errs...)
		case <-t.C:
		}
		mu.Lock()
		var free []string
		for _, m := range c.Live() {
			if !down[m.UUID()] {
				free = append(free, m.UUID())
			}
		}
		if len(bag) > 1 && bag[0] == StoreOutage && len(down) > 0 {
			bag[0], bag[1] = bag[1], bag[0] // the outage waits for a quiet cluster; the next kind goes first
		}
		f := bag[0]
		if len(down) >= maxDown || len(free) == 0 || (f == StoreOutage && len(down) > 0) {
			rep.Skipped++ // f stays first in the bag, for the next draw
			publish()
			mu.Unlock()
			continue
		}
		bag = bag[1:]
		targets := []string{free[pick%uint64(len(free))]}
		if f == StoreOutage {
			targets = free
		}
		for _, id := range targets {
			down[id] = true
		}
		rep.Injected[f]++
		publish()
		mu.Unlock()
		if f == ClockOffset {
			logf("chaos: fault %d: %s %v by %s for %s", k, f, targets, step, lasts)
		} else {
			logf("chaos: fault %d: %s %v for %s", k, f, targets, lasts)
		}
		var heals []func() error
		for _, id := range targets {
			heals = append(heals, n.inject(f, id, step))
		}
		wg.Go(func() {
			t := time.NewTimer(lasts)
			defer t.Stop()
			select {
			case <-t.C:
			case <-stop:
			}
			var err error
			for _, heal := range heals {
				err = errors.Join(err, heal())
			}
			if err != nil {
				err = fmt.Errorf("chaos: end fault %d (%s %v): %w", k, f, targets, err)
			}
			logf("chaos: fault %d ended: %s %v (%v)", k, f, targets, err)
			mu.Lock()
			for _, id := range targets {
				delete(down, id)
			}
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
		})
	}
}

// inject starts fault f on node id (a ClockOffset by step) and returns
// what ends it.
func (n *Nemesis) inject(f Fault, id string, step time.Duration) (heal func() error) {
	c := n.Cluster
	replace := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := c.Add(ctx)
		return err
	}
	switch f {
	case Kill:
		c.Kill(id)
		return replace
	case Stop:
		done := make(chan error, 1)
		go func() { done <- c.Stop(id) }()
		return func() error {
			<-done // a node's Close error says nothing of the cluster
			return replace()
		}
	case StopHeartbeat:
		c.StopHeartbeat(id)
		return func() error { c.ResumeHeartbeat(id); return nil }
	case Partition:
		c.Partition(id, true)
		return func() error { c.Partition(id, false); return nil }
	case Drop:
		c.Drop(id, true)
		return func() error { c.Drop(id, false); return nil }
	case Pause:
		c.Pause(id, true)
		return func() error { c.Pause(id, false); return nil }
	case StoreOutage: // on each node
		c.StopHeartbeat(id)
		return func() error { c.ResumeHeartbeat(id); return nil }
	case ClockOffset:
		c.ClockOffset(id, step)
		return func() error { c.ClockOffset(id, 0); return nil }
	}
	return func() error { return fmt.Errorf("chaos: unknown fault %v", f) }
}

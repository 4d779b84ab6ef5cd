package chaos_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/service/servicetest/chaos"
)

// TestRegisterUnderChaos: 5 nodes of a correct register service, 8
// clients, every fault kind: every register's history is linearizable.
func TestRegisterUnderChaos(t *testing.T) {
	start := time.Now()
	var res runResult
	synctest.Test(t, func(t *testing.T) {
		res = run{flaw: correct, seed: 1, nodes: 5, clients: 8, ops: 10000, keys: 8, hold: 2 * time.Second, dir: t.TempDir()}.do(t)
	})
	t.Logf("%s in %s real time; outcomes %v; nemesis %s", res.check, time.Since(start).Round(time.Millisecond), res.outcomes, res.nemesis)
	if !res.check.OK() {
		t.Errorf("not linearizable: %s", res.check)
	}
	if res.overdue > 0 {
		t.Errorf("%d calls ended after their deadline", res.overdue)
	}
}

// TestFlawsCaught: a register service with a deliberate mistake is
// caught, a violation reported with its seed, within 20 seeds, under
// pauses longer than the calls' deadline (the held handlers run after
// the peers evicted their node, and after their callers gave up).
func TestFlawsCaught(t *testing.T) {
	for _, tc := range []struct {
		name string
		flaw flaw
	}{
		{"state in node memory", nodeMemory},
		{"writes without the fence", unfenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 20; seed++ {
				var res runResult
				synctest.Test(t, func(t *testing.T) {
					res = run{flaw: tc.flaw, seed: seed, nodes: 5, clients: 8, ops: 5000, keys: 4, hold: 2 * time.Second}.do(t)
				})
				if !res.check.OK() {
					t.Logf("caught at seed %d (nemesis %s; outcomes %v): %s", seed, res.nemesis, res.outcomes, res.check)
					return
				}
			}
			t.Errorf("%s: not caught within 20 seeds", tc.name)
		})
	}
}

// TestCorrectAcrossSeeds: the correct register service passes under 20
// seeds (4 with the race detector) of every fault kind, long pauses included: the kit reports no
// false violation.
func TestCorrectAcrossSeeds(t *testing.T) {
	seeds := uint64(20)
	if raceEnabled {
		seeds = 4
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		synctest.Test(t, func(t *testing.T) {
			res := run{flaw: correct, seed: seed, nodes: 5, clients: 8, ops: 2000, keys: 4, hold: 2 * time.Second}.do(t)
			if !res.check.OK() {
				t.Errorf("seed %d (nemesis %s): %s", seed, res.nemesis, res.check)
			}
		})
	}
}

// TestRetriedWithoutItsID: an add retried after an unknown outcome under
// its first message id runs once (the fence records it); retried under a
// new id it may run twice, and the counter's history shows it.
func TestRetriedWithoutItsID(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		synctest.Test(t, func(t *testing.T) {
			if rep, nrep := countRun(t, seed, 2000, false); !rep.OK() {
				t.Errorf("retried with its id, seed %d (nemesis %s): %s", seed, nrep, rep)
			}
		})
	}
	for seed := uint64(1); seed <= 20; seed++ {
		var rep chaos.Report
		var nrep chaos.NemesisReport
		synctest.Test(t, func(t *testing.T) { rep, nrep = countRun(t, seed, 2000, true) })
		if !rep.OK() {
			t.Logf("caught at seed %d (nemesis %s): %s", seed, nrep, rep)
			return
		}
	}
	t.Error("an add retried under a new id: not caught within 20 seeds")
}

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
	t.Logf("%s in %s real time; outcomes %v; nemesis %s; audit: %s", res.check, time.Since(start).Round(time.Millisecond), res.outcomes, res.nemesis, res.audit)
	if !res.check.OK() {
		t.Errorf("not linearizable: %s", res.check)
	}
	if !res.audit.OK() || res.audit.Commits == 0 {
		t.Errorf("the audit: %s", res.audit)
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
				if !res.check.OK() || !res.audit.OK() {
					t.Logf("caught at seed %d (nemesis %s; outcomes %v): %s; audit: %s", seed, res.nemesis, res.outcomes, res.check, res.audit)
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
			if !res.check.OK() || !res.audit.OK() {
				t.Errorf("seed %d (nemesis %s): %s; audit: %s", seed, res.nemesis, res.check, res.audit)
			}
		})
	}
}

// TestRetriedWithoutItsID: an add retried after an unknown outcome under
// its first message id runs once (the fence records it); retried under a
// new id it may run twice, and the counter's history shows it. The
// audit names the commits under no operation's id.
func TestRetriedWithoutItsID(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		synctest.Test(t, func(t *testing.T) {
			rep, audit, nrep := countRun(t, seed, 2000, false)
			if !rep.OK() || !audit.OK() || audit.Commits == 0 {
				t.Errorf("retried with its id, seed %d (nemesis %s): %s; audit: %s", seed, nrep, rep, audit)
			}
		})
	}
	for seed := uint64(1); seed <= 20; seed++ {
		var rep chaos.Report
		var audit chaos.Audit
		var nrep chaos.NemesisReport
		synctest.Test(t, func(t *testing.T) { rep, audit, nrep = countRun(t, seed, 2000, true) })
		if !rep.OK() {
			t.Logf("caught at seed %d (nemesis %s): %s; audit: %s", seed, nrep, rep, audit)
			if audit.Phantom == 0 {
				t.Errorf("the audit counts no commit under a new id: %s", audit)
			}
			return
		}
	}
	t.Error("an add retried under a new id: not caught within 20 seeds")
}

// TestClockOffsets: nodes whose clocks step a minute ahead or behind,
// past every call's deadline, and back: every history stays
// linearizable, no commit lands after its caller's deadline, and the
// stepped nodes follow their step once two readings of the store's
// clock confirm it, so that few calls are lost to deadlines misread
// (while heartbeat.ClockSync kept the samples a step contradicts, seed 1
// ended 650 of the 3,000 calls unknown, the refused as expired among
// them).
func TestClockOffsets(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		synctest.Test(t, func(t *testing.T) {
			res := run{flaw: correct, seed: seed, nodes: 5, clients: 8, ops: 3000, keys: 4, hold: 2 * time.Second,
				faults: []chaos.Fault{chaos.ClockOffset}, offset: time.Minute}.do(t)
			t.Logf("seed %d: outcomes %v; nemesis %s", seed, res.outcomes, res.nemesis)
			if !res.check.OK() || !res.audit.OK() {
				t.Errorf("seed %d (nemesis %s): %s; audit: %s", seed, res.nemesis, res.check, res.audit)
			}
			if res.nemesis.Injected[chaos.ClockOffset] == 0 {
				t.Errorf("seed %d: no clock offset injected", seed)
			}
			if unknown := res.outcomes[chaos.Unknown]; unknown > 3000*4/100 {
				t.Errorf("seed %d: %d of 3000 calls ended unknown (over 4 %%): the stepped clocks are not followed", seed, unknown)
			}
		})
	}
}

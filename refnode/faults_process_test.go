package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/heartbeat"
)

// The delivery-under-faults test of issue 12: a caller learns the truth
// within its deadline, and nothing runs after it.
const (
	fdVMs     = 60               // VMs the load calls, one call per VM at a time
	fdRate    = 40               // calls started per second
	fdTimeout = 5 * time.Second  // each call's deadline
	fdHold    = 10 * time.Second // how long most faults last
	fdDBHold  = 9 * time.Second  // how long the database is cut
	fdWarmup  = 3 * time.Second  // healthy load before each fault (and until every VM answered)
	// fdBound is how late after its caller's deadline a message may
	// still start: 100 ms, plus the 50 ms the cluster clock may be off
	// (heartbeat.MaxClockError).
	fdBound = 100*time.Millisecond + heartbeat.MaxClockError
	// fdRecoverBound bounds the wait for every VM to answer after a
	// fault; generous, as the machine is shared.
	fdRecoverBound  = 60 * time.Second
	faultsReportVar = "CLOUDBUS_FAULTS_REPORT" // optional: a file the tables are written to
)

// faultCase is one fault: inject returns the function that heals it.
type faultCase struct {
	name   string
	skew   time.Duration // every node's clock skew while the fault runs
	hold   time.Duration
	inject func(t *testing.T, fc *faultCluster) (heal func())
}

// pauseB stops node B with SIGSTOP; the heal resumes it.
func pauseB(t *testing.T, fc *faultCluster) func() {
	n := fc.Node(1)
	n.Pause(t)
	return func() { n.Resume(t) }
}

var faultCases = []faultCase{
	{name: "(a) SIGSTOP of node B for 10s", hold: fdHold, inject: pauseB},
	{name: "(b) node B's broker link blackholed for 10s", hold: fdHold, inject: func(t *testing.T, fc *faultCluster) func() {
		p := fc.Node(1).Bus
		p.Stall()
		return p.Heal
	}},
	{name: "(c) every node's broker link cut for 10s", hold: fdHold, inject: func(t *testing.T, fc *faultCluster) func() {
		for _, n := range fc.Nodes() {
			n.CutBus()
		}
		return func() {
			for _, n := range fc.Nodes() {
				n.HealBus()
			}
		}
	}},
	{name: "(d) the database cut for 9s (every node's link)", hold: fdDBHold, inject: func(t *testing.T, fc *faultCluster) func() {
		for _, n := range fc.Nodes() {
			n.DB.Cut()
		}
		return func() {
			for _, n := range fc.Nodes() {
				n.DB.Heal()
			}
		}
	}},
	{name: "(e) SIGSTOP of node B for 10s, every clock +1s", skew: time.Second, hold: fdHold, inject: pauseB},
	{name: "(f) SIGSTOP of node B for 10s, every clock -1s", skew: -time.Second, hold: fdHold, inject: pauseB},
}

// TestDeliveryUnderFaults runs three `refnode serve` processes on
// RabbitMQ and PostgreSQL with the default heartbeat timing (beat 500 ms,
// lease 2 s, evict 3 s), each reaching the broker and the database
// through its own proxies, and a client in this process calling 60 VMs
// through api.portal at 40 calls a second, one call per VM at a time,
// each with a 5 s deadline. It injects six faults one at a time, each
// after a healthy warm-up and followed by a recovery: a node paused for
// 10 s, its broker link blackholed for 10 s, every broker link cut for
// 10 s, the database cut for 9 s, and the pause again with every node's
// clock skewed +1 s and -1 s (the nodes restarted one by one between).
//
// For every window (a fault with its warm-up and recovery, or a
// restart), it asserts the two promises: no operation starts on its
// owner later than its caller's deadline plus 150 ms (100 ms and the
// cluster clock's 50 ms), and every call ends with a reply or a typed
// error by its deadline plus 150 ms. It prints a table of the calls by
// outcome, the late runs and the recovery time (from the fault's end
// until every VM answered), and, for any broken promise, the calls and
// the executions that broke it.
func TestDeliveryUnderFaults(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Runs: "the fault test runs processes for about three minutes", FullSpeed: true, Timeout: 8 * time.Minute})
	testStart := time.Now()
	fc := newFaultCluster(t, ctx, broker, faultOptions{Nodes: 3, Name: "faults"})
	fc.Start(t, ctx)
	t.Logf("3 nodes serving and agreeing %s after the test began: %s", since(testStart), fc.describe())
	cl := fc.Client(t, ctx)
	vms := createVMs(t, ctx, cl, fdVMs)
	t.Logf("%d VMs created %s after the test began", len(vms), since(testStart))

	d := startDriver(cl, vms, driverOptions{Rate: fdRate, Timeout: fdTimeout})
	t.Cleanup(d.stop) // before the client closes (cleanups run last-in first-out)
	var windows []faultWindow
	skew := time.Duration(0)
	for _, f := range faultCases {
		if f.skew != skew {
			windows = append(windows, restartWithSkew(t, ctx, fc, d, f.skew))
			skew = f.skew
		}
		w := runFault(t, ctx, fc, d, f)
		windows = append(windows, w)
		t.Logf("%s: fault %s-%s, every VM answered again %s after it ended (%s into the test)",
			f.name, w.start.Format(clockFormat), w.end.Format(clockFormat), recoveryText(w), since(testStart))
	}
	d.stop()
	fc.Terminate(t, 20*time.Second) // their op logs complete
	ops, err := collectOps(fc.OpLogs(), fc.Labels())
	require.NoError(t, err, "read the op logs")

	rows := analyzeFaults(windows, d.Calls(), ops)
	report := faultReport(rows, ops, d.Skipped(), time.Since(testStart))
	t.Log("\n" + report)
	if path := os.Getenv(faultsReportVar); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(report), 0o644), "write the tables to %s=%s", faultsReportVar, path)
	}
	for _, r := range rows {
		assert.Empty(t, r.lateRuns, "%s: no operation starts after its caller's deadline + %s\n%s", r.w.name, fdBound, r.lateEvidence(fc))
		assert.Empty(t, r.untimely, "%s: every call ends with a reply or a typed error by its deadline + %s\n%s", r.w.name, fdBound, r.untimelyEvidence())
		assert.Zero(t, r.okWithoutRun, "%s: every successful call has its run in an op log (the collector sees the runs)", r.w.name)
		assert.False(t, r.w.recovered.IsZero(), "%s: every VM answers again within %s of the fault's end", r.w.name, fdRecoverBound)
	}
}

// faultWindow is the stretch of the load one fault (or a restart)
// accounts for: calls invoked in [from, to).
type faultWindow struct {
	name       string
	restart    bool
	from, to   time.Time
	start, end time.Time // the fault itself (a restart: its first and last signal)
	recovered  time.Time // every VM had answered after end; zero: not within fdRecoverBound
}

// runFault waits until every VM answered and the warm-up passed, injects
// the fault, heals it after its hold, then waits until every VM answered
// again, the rings agree, and every call invoked before the heal ended.
func runFault(t *testing.T, ctx context.Context, fc *faultCluster, d *vmDriver, f faultCase) faultWindow {
	t.Helper()
	w := faultWindow{name: f.name, from: time.Now()}
	_, err := d.awaitAnswered(ctx, w.from, fdRecoverBound)
	require.NoError(t, err, "%s: every VM answers before the fault", f.name)
	sleepUntil(ctx, w.from.Add(fdWarmup))
	w.start = time.Now()
	heal := f.inject(t, fc)
	sleepUntil(ctx, w.start.Add(f.hold))
	heal()
	w.end = time.Now()
	settle(t, ctx, fc, d, &w)
	return w
}

// restartWithSkew restarts the nodes one by one with every clock skewed
// by skew, while the load goes on.
func restartWithSkew(t *testing.T, ctx context.Context, fc *faultCluster, d *vmDriver, skew time.Duration) faultWindow {
	t.Helper()
	w := faultWindow{name: "restart of every node, one by one, clock skew " + signed(skew), restart: true, from: time.Now()}
	w.start = w.from
	for _, n := range fc.Nodes() {
		n.Skew = skew
		n.Restart(t, ctx)
		require.NoError(t, poll(ctx, fc.Agreed), "the rings agree after node %s restarted", n.Label())
	}
	w.end = time.Now()
	t.Logf("restarted with clock skew %s: %s", signed(skew), fc.describe())
	settle(t, ctx, fc, d, &w)
	return w
}

// settle waits after a fault's end: every VM answered (bounded), the
// rings agree, and every call invoked before the end has ended.
func settle(t *testing.T, ctx context.Context, fc *faultCluster, d *vmDriver, w *faultWindow) {
	t.Helper()
	rec, err := d.awaitAnswered(ctx, w.end, fdRecoverBound)
	if err != nil {
		t.Logf("%s: %v", w.name, err)
	}
	w.recovered = rec
	rctx, cancel := context.WithTimeout(ctx, fdRecoverBound)
	defer cancel()
	require.NoError(t, poll(rctx, fc.Agreed), "%s: the rings agree again", w.name)
	sleepUntil(ctx, w.end.Add(fdTimeout+500*time.Millisecond))
	w.to = time.Now()
}

// sleepUntil sleeps until at or until ctx ends.
func sleepUntil(ctx context.Context, at time.Time) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(at)):
	}
}

// since is the time since start, to the millisecond.
func since(start time.Time) time.Duration { return time.Since(start).Round(time.Millisecond) }

// signed is d with its sign: +1s, -1s, 0s.
func signed(d time.Duration) string {
	if d > 0 {
		return "+" + d.String()
	}
	return d.String()
}

// recoveryText is the recovery time of w, or "not within" the bound.
func recoveryText(w faultWindow) string {
	if w.recovered.IsZero() {
		return "not within " + fdRecoverBound.String()
	}
	return w.recovered.Sub(w.end).Round(time.Millisecond).String()
}

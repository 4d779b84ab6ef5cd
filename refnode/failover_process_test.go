package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/service"
)

// The failover measurement.
const (
	foVMs         = 300 // VMs created before the first kill
	foHosts       = 3   // hosts they are placed on
	foKillRounds  = 5   // SIGKILLs, each followed by a replacement node
	foKillBound   = 15 * time.Second
	foMedianBound = 2500 * time.Millisecond // the session locks' fast path works (the beat rule alone takes 3 s or more)
	foTermBound   = 5 * time.Second
	foKillTarget  = time.Second             // median, with the default heartbeat timing and session locks
	foKillMaxGoal = 1500 * time.Millisecond // max, likewise
	foTermTarget  = time.Second
	foReportVar   = "CLOUDBUS_FAILOVER_REPORT" // optional: a file the figures are written to (each database's after the other)
	foCreateTasks = 16                         // VMs created at once
)

// TestFailover measures failover on three `refnode serve` processes on
// RabbitMQ and PostgreSQL, then MariaDB, with the default heartbeat
// timing (beat every 500 ms, fence after 2 s, evict after 3 s, session
// locks on). It creates 300 VMs; a client-mode caller in this process
// keeps calling VM operations on all of them through api.portal. Five
// times, it SIGKILLs a node and measures from the kill until every VM
// the dead node owned has answered from a survivor, then starts a
// replacement node and waits until the three rings agree. Then it
// SIGTERMs a node (an orderly leave) and measures the same, and the calls
// that failed. It prints the figures, asserts generous bounds (every
// SIGKILL takeover under 15 s and their median under 2.5 s, which the
// beat rule alone cannot give; the SIGTERM takeover under 5 s) and
// reports whether the targets (SIGKILL median ≤ 1 s and max ≤ 1.5 s,
// SIGTERM ≤ 1 s) were met.
func TestFailover(t *testing.T) {
	var reports []string
	for _, db := range []struct {
		name string
		db   procDB
	}{{"PostgreSQL", onPostgres}, {"MariaDB", onMariaDB}} {
		t.Run(db.name, func(t *testing.T) {
			reports = append(reports, failover(t, db.db, db.name))
		})
	}
	if path := os.Getenv(foReportVar); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(strings.Join(reports, "\n")), 0o644), "write the figures to %s=%s", foReportVar, path)
	}
}

// failover runs the measurement on db and returns its report.
func failover(t *testing.T, db procDB, dbName string) string {
	ctx, broker := startProcessTest(t, processTest{Runs: "the failover measurement runs processes for about a minute", Timeout: 150 * time.Second})
	testStart := time.Now()
	fc := &failoverCluster{procCluster: newProcCluster(t, ctx, broker, db, "fo")}
	for range 3 {
		fc.launch(t)
	}
	awaitAgreed(t, ctx, fc.live)
	t.Logf("3 nodes serving and agreeing %s after the test began", time.Since(testStart).Round(time.Millisecond))

	cl := newClient(t, ctx, broker, fc.prefix)
	vms := createVMs(t, ctx, cl, foVMs)
	t.Logf("%d VMs created on %d hosts %s after the test began", len(vms), foHosts, time.Since(testStart).Round(time.Millisecond))
	l := startLoad(ctx, cl, vms)
	t.Cleanup(func() { l.stop() }) // before the client closes (cleanups run last-in first-out)

	var kills []killFigures
	for round := 1; round <= foKillRounds; round++ {
		k := fc.killRound(t, ctx, l, vms)
		k.round = round
		kills = append(kills, k)
		assert.Less(t, k.takeover, foKillBound, "round %d: every VM of the killed node answers from a survivor within %s", round, foKillBound)
		c := fc.launch(t)
		require.NoError(t, c.awaitHealthy(ctx), "replacement node %s", c.label)
		require.NoError(t, poll(ctx, fc.agreed), "round %d: the rings agree on the replacement %s", round, c.label)
	}
	term := fc.termRound(t, ctx, l, vms)
	assert.Less(t, term.takeover, foTermBound, "every VM of the leaving node answers from another node within %s", foTermBound)
	l.stop()

	var takeovers []time.Duration
	for _, k := range kills {
		takeovers = append(takeovers, k.takeover)
	}
	_, med, _ := spread(takeovers)
	assert.Less(t, med, foMedianBound, "the median SIGKILL takeover: a dead node's session lock must let a survivor evict it before its beat is EvictAfter old")

	report := failoverReport(dbName, kills, term, time.Since(testStart))
	t.Log("\n" + report)
	return report
}

// failoverCluster is the measurement's refnode serve processes on a
// procCluster, each started with the same flags. Only the
// test's goroutine uses it.
type failoverCluster struct {
	*procCluster
	live []*child // the nodes not killed, in start order
}

// launch starts a node labelled A, B, C, … in start order; the caller
// waits for it with awaitHealthy.
func (fc *failoverCluster) launch(t *testing.T) *child {
	t.Helper()
	c := fc.serve(t, string(rune('A'+len(fc.all))), []string{"-bus", fc.broker, "-db", fc.db}, nil)
	fc.live = append(fc.live, c)
	return c
}

// agreed checks that every live node serves and has a ring of exactly the
// live nodes.
func (fc *failoverCluster) agreed() error { return agreeOn(fc.live) }

// remove takes c out of the live nodes.
func (fc *failoverCluster) remove(c *child) {
	fc.live = slices.DeleteFunc(fc.live, func(x *child) bool { return x == c })
}

// owners returns the owner of a VM on a ring of the live nodes, built
// here independently of the nodes' copies.
func (fc *failoverCluster) owners(t *testing.T) func(vm string) string {
	t.Helper()
	r := ringOver(t, idsOf(fc.live))
	return func(vm string) string {
		o, err := r.Locate(vm)
		if err != nil {
			return "no owner: " + err.Error()
		}
		return o
	}
}

// victim picks the oldest live node that owns a VM, and returns its VMs.
func (fc *failoverCluster) victim(vms []string, owner func(string) string) (*child, []string) {
	for _, c := range fc.live {
		var own []string
		for _, vm := range vms {
			if owner(vm) == c.id {
				own = append(own, vm)
			}
		}
		if len(own) > 0 {
			return c, own
		}
	}
	return nil, nil
}

// settle waits until every VM answered the load after since, from its
// owner on the live nodes' ring.
func (fc *failoverCluster) settle(t *testing.T, ctx context.Context, l *load, since time.Time, what string) {
	t.Helper()
	owner := fc.owners(t)
	require.NoError(t, poll(ctx, func() error { return l.settled(since, owner) }), "%s: every VM answers from its owner", what)
}

// killFigures are one SIGKILL round's measurements, from the kill.
type killFigures struct {
	round    int
	victim   string        // label
	vms      int           // VMs the victim owned
	lastBeat time.Duration // age of its last heartbeat at the kill, by the database's clock
	evicted  time.Duration // the first survivor's ring dropped the victim
	rings    time.Duration // every survivor's ring dropped it
	half     time.Duration // half the VMs of the victim answered from a survivor
	takeover time.Duration // every VM of the victim answered from a survivor
	calls    window        // from the kill until every VM answered again after the takeover
	between  window        // from the previous round's end (or the load's start) to the kill: a node joining
}

// killRound waits until every VM answers from its owner, SIGKILLs the
// oldest node that owns VMs and measures the takeover while the load goes
// on.
func (fc *failoverCluster) killRound(t *testing.T, ctx context.Context, l *load, vms []string) killFigures {
	t.Helper()
	fc.settle(t, ctx, l, time.Now(), "before the kill")
	owner := fc.owners(t)
	victim, owned := fc.victim(vms, owner)
	require.NotNil(t, victim, "some node owns a VM")
	k := killFigures{victim: victim.label, vms: len(owned)}

	// The heartbeat's age is read before the kill too: a survivor that
	// finds the victim's lock free may evict it, and delete its row,
	// before the read after the kill (under -race in CI it did).
	before, err := fc.tables.beatAge(ctx, victim.id)
	require.NoError(t, err, "read the heartbeat of node %s before the kill", victim.label)
	read := time.Now()
	killed := time.Now()
	k.between = l.mark(killed, victim.id, owned)
	require.NoError(t, victim.signal(syscall.SIGKILL, 10*time.Second))
	fc.remove(victim)
	switch age, err := fc.tables.beatAge(ctx, victim.id); {
	case err == nil:
		k.lastBeat = age - time.Since(killed)
	case errors.Is(err, sql.ErrNoRows):
		k.lastBeat = before + killed.Sub(read)
		t.Logf("node %s was evicted before its heartbeat was read after the kill; its age at the kill is taken from the read before it", victim.label)
	default:
		require.NoError(t, err, "read the heartbeat of the killed node %s", victim.label)
	}

	tctx, cancel := context.WithTimeout(ctx, foKillBound)
	defer cancel()
	drops, err := ringDrops(tctx, fc.live, victim.id, killed)
	require.NoError(t, err, "the survivors drop node %s from their rings", victim.label)
	k.evicted, k.rings = slices.Min(drops), slices.Max(drops)
	require.NoError(t, poll(tctx, func() error {
		var err error
		k.half, k.takeover, err = l.firstAnswers(owned)
		return err
	}), "the %d VMs of node %s answer from the survivors", len(owned), victim.label)

	fc.settle(t, ctx, l, killed.Add(k.takeover), "after the takeover")
	k.calls = l.mark(time.Now(), "", nil)
	return k
}

// ringDrops polls the nodes' /status every 10 ms until none has node in
// its ring, and returns when each dropped it, after from.
func ringDrops(ctx context.Context, nodes []*child, node string, from time.Time) ([]time.Duration, error) {
	drops := make([]time.Duration, len(nodes))
	for {
		pending := 0
		for i, c := range nodes {
			if drops[i] != 0 {
				continue
			}
			st, err := c.status()
			if err == nil && !slices.Contains(st.Ring.Members, node) {
				drops[i] = time.Since(from)
				continue
			}
			pending++
		}
		if pending == 0 {
			return drops, nil
		}
		select {
		case <-ctx.Done():
			return drops, fmt.Errorf("%d of %d nodes still have %s in their ring: %w", pending, len(nodes), node, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// termFigures are the SIGTERM round's measurements, from the signal.
type termFigures struct {
	leaver   string
	vms      int
	rings    time.Duration // every other node's ring dropped the leaver
	half     time.Duration // half the VMs of the leaver answered from another node
	takeover time.Duration // every VM of the leaver answered from another node
	exited   time.Duration // the leaver's process exited
	calls    window        // from the signal until every VM answered after the exit
	between  window        // from the last kill round's end to the signal
}

// termRound SIGTERMs the oldest node that owns VMs and measures until its
// VMs answer from the others, and the calls that failed meanwhile.
func (fc *failoverCluster) termRound(t *testing.T, ctx context.Context, l *load, vms []string) termFigures {
	t.Helper()
	fc.settle(t, ctx, l, time.Now(), "before the SIGTERM")
	owner := fc.owners(t)
	leaver, owned := fc.victim(vms, owner)
	require.NotNil(t, leaver, "some node owns a VM")
	tf := termFigures{leaver: leaver.label, vms: len(owned)}

	termAt := time.Now()
	tf.between = l.mark(termAt, leaver.id, owned)
	require.NoError(t, leaver.cmd.Process.Signal(syscall.SIGTERM))
	tctx, cancel := context.WithTimeout(ctx, foTermBound+10*time.Second)
	defer cancel()
	others := slices.DeleteFunc(slices.Clone(fc.live), func(c *child) bool { return c == leaver })
	drops, err := ringDrops(tctx, others, leaver.id, termAt)
	require.NoError(t, err, "the other nodes drop node %s from their rings", leaver.label)
	tf.rings = slices.Max(drops)
	require.NoError(t, poll(tctx, func() error {
		var err error
		tf.half, tf.takeover, err = l.firstAnswers(owned)
		return err
	}), "the %d VMs of node %s answer from the others after its SIGTERM", len(owned), leaver.label)

	require.NoError(t, leaver.wait("SIGTERM", 15*time.Second))
	tf.exited = time.Since(termAt)
	fc.remove(leaver)
	out, errOut := leaver.output()
	require.NoError(t, leaver.waitErr, "node %s exits 0 after SIGTERM; stderr:\n%s", leaver.label, tail(errOut, 2000))
	assert.Contains(t, out, "left: ", "node %s left in order", leaver.label)
	require.NoError(t, poll(ctx, fc.agreed), "the rings agree without %s", leaver.label)
	fc.settle(t, ctx, l, time.Now(), "after the leave")
	tf.calls = l.mark(time.Now(), "", nil)
	if left, ok, err := queuesWithPrefix(ctx, fc.broker, fc.prefix); ok && err == nil {
		for q := range left {
			assert.NotContains(t, q, leaver.id, "node %s deleted its queues when it left", leaver.label)
		}
	}
	return tf
}

// createVMs adds an image and foHosts hosts, then creates n VMs with new
// UUIDs, foCreateTasks at a time, and returns their UUIDs.
func createVMs(t *testing.T, ctx context.Context, cl *service.Client, n int) []string {
	t.Helper()
	img, err := service.Call[api.ImageReply](ctx, cl, api.AddImage{UUID: message.NewUUID(), Name: "failover"})
	require.NoError(t, err, "add an image")
	for i := range foHosts {
		_, err := service.Call[api.HostReply](ctx, cl, api.AddHost{UUID: message.NewUUID(), Address: fmt.Sprintf("10.0.1.%d", i+1)})
		require.NoError(t, err, "add host %d", i+1)
	}
	vms := make([]string, n)
	for i := range vms {
		vms[i] = message.NewUUID()
	}
	errs := make([]error, len(vms))
	sem := make(chan struct{}, foCreateTasks)
	var wg sync.WaitGroup
	for i, vm := range vms {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, errs[i] = service.Call[api.VmCreated](ctx, cl, api.CreateVm{UUID: vm, Name: fmt.Sprintf("fo-%03d", i), ImageUUID: img.Image.UUID},
				bus.WithTimeout(20*time.Second))
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "create VM %d (%s)", i, vms[i])
	}
	return vms
}

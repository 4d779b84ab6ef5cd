package main

import (
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/servicetest/proxy"
)

// The fault harness: N `refnode serve` processes on RabbitMQ and
// PostgreSQL or MariaDB (faultOptions.DB), a procCluster
// (process_preamble_test.go) each of whose nodes reaches the broker and
// the database through its own test-owned TCP proxy (one per node per
// link), so that a test can cut (reset), blackhole (stall) and heal each
// link of each node, pause, kill, terminate and restart nodes, and skew
// their clocks. Every node writes an op log (refnode serve -op-log) that
// collectOps reads, and a load driver (harness_load_test.go) records
// every call a client made.
//
//	ctx, broker := startProcessTest(t, processTest{FullSpeed: true, Timeout: 3 * time.Minute})
//	fc := newFaultCluster(t, ctx, broker, faultOptions{Nodes: 3, Name: "faults"})
//	fc.Node(0).Flags = append(fc.Node(0).Flags, "-vm-sweep", "2s") // slot A's processes only
//	fc.Start(t, ctx)                  // every node healthy, the rings agree
//	cl := fc.Client(t, ctx)           // on its own, unfaulted connection
//	d := startDriver(cl, vms, driverOptions{}) // 40 calls/s, 5 s deadline, x-op on each
//	fc.Node(1).StallBus()             // node B's broker link blackholed (Cut: reset)
//	fc.Node(1).HealBus()
//	fc.Node(0).DB.Cut()               // node A's database link reset and refused
//	fc.Node(0).Pause(t)               // SIGSTOP; Resume sends SIGCONT
//	fc.Node(2).Kill(t)                // SIGKILL; Terminate: SIGTERM, an orderly leave
//	fc.Node(2).Skew = time.Second     // the next process of slot C runs 1 s ahead
//	fc.Node(2).Restart(t, ctx)        // a new node (new UUID) through the same proxies
//	d.stop()
//	fc.Terminate(t, 20*time.Second)   // op logs complete
//	ops, err := collectOps(fc.OpLogs(), fc.Labels()) // op id -> runs on owners and portals
//	jan := newJanitor(t, broker)      // harness_broker_test.go: does a queue exist, how full is it
//	jan.inspectAll(nodeQueues(fc.Prefix(), fc.Node(2).ID()))
//	fc.Node(0).Proc().logLines("evicted a node", id) // a node's stderr lines, with their times
//
// Only the test's goroutine uses a faultCluster and its nodes; the
// proxies are safe for concurrent use.

// faultOptions configure a faultCluster; the zero value is three nodes
// on PostgreSQL with refnode's default timing.
type faultOptions struct {
	// Nodes is the number of node slots. Default 3.
	Nodes int
	// Name goes into the prefix, refnode-test-<name>-<random>. Default
	// "harness".
	Name string
	// DB is the database: onPostgres (the default) or onMariaDB.
	DB procDB
	// Flags are more refnode serve flags for every process; each slot
	// starts with a copy in faultNode.Flags.
	Flags []string
	// Heartbeat and EvictAfter are passed to -heartbeat and -evict-after
	// if set; default: refnode's (heartbeat.DefaultConfig).
	Heartbeat, EvictAfter time.Duration
	// Skew is each slot's -clock-skew, by index; missing entries are 0.
	Skew []time.Duration
	// LogLevel is -log-level. Default "info".
	LogLevel string
}

// faultCluster is the harness: node slots with their proxies, sharing
// the procCluster's broker, database and prefix.
type faultCluster struct {
	*procCluster
	opts  faultOptions
	nodes []*faultNode
}

// faultNode is one node slot: its two proxies, its clock skew, and the
// processes started in it (a restart starts a new one, with a new UUID,
// through the same proxies).
type faultNode struct {
	fc    *faultCluster
	label string // A, B, C, …
	index int
	// Bus and DB are the node's links to the broker and the database.
	// On a RabbitMQ cluster, Bus is the link to the first broker node and
	// BusAll holds one proxy per broker node (Bus first); CutBus,
	// StallBus and HealBus act on them all.
	Bus, DB       *proxy.Proxy
	BusAll        []*proxy.Proxy
	busURL, dbURL string
	// Skew is the -clock-skew the next process of the slot starts with.
	Skew time.Duration
	// Flags are the more refnode serve flags the next process of the
	// slot starts with; from faultOptions.Flags.
	Flags  []string
	proc   *child   // the current process, nil before the first start
	runs   []*child // every process of the slot, oldest first
	opLogs []string // their op logs
	paused bool
}

// newFaultCluster prepares a cluster on a new procCluster, with the
// proxies of every slot, closed at the end of the test after the
// processes are killed and before the broker and the database are
// cleaned. No node runs until Start.
func newFaultCluster(t *testing.T, ctx context.Context, broker string, opts faultOptions) *faultCluster {
	t.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Name == "" {
		opts.Name = "harness"
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "info"
	}
	fc := &faultCluster{procCluster: newProcCluster(t, ctx, broker, opts.DB, opts.Name), opts: opts}
	t.Cleanup(func() {
		for _, n := range fc.nodes {
			for _, p := range append([]*proxy.Proxy{n.DB}, n.BusAll...) {
				if p != nil {
					p.Close()
				}
			}
		}
	})
	for i := range opts.Nodes {
		n := &faultNode{fc: fc, index: i, label: string(rune('A' + i)), Flags: slices.Clone(opts.Flags)}
		if i < len(opts.Skew) {
			n.Skew = opts.Skew[i]
		}
		var err error
		var busURLs []string
		for _, u := range amqpbus.SplitURLs(broker) {
			var p *proxy.Proxy
			var pu string
			if p, pu, err = listenProxy(u); err != nil {
				break
			}
			n.BusAll, busURLs = append(n.BusAll, p), append(busURLs, pu)
		}
		if err == nil {
			n.Bus, n.busURL = n.BusAll[0], strings.Join(busURLs, ",")
			n.DB, n.dbURL, err = listenProxy(fc.db)
		}
		fc.nodes = append(fc.nodes, n) // before the check: the cleanup closes what was opened
		require.NoError(t, err, "proxies of node %s", n.label)
	}
	return fc
}

// CutBus cuts the node's links to every broker node (Cut: reset).
func (n *faultNode) CutBus() {
	for _, p := range n.BusAll {
		p.Cut()
	}
}

// StallBus blackholes the node's links to every broker node.
func (n *faultNode) StallBus() {
	for _, p := range n.BusAll {
		p.Stall()
	}
}

// HealBus undoes CutBus and StallBus.
func (n *faultNode) HealBus() {
	for _, p := range n.BusAll {
		p.Heal()
	}
}

// listenProxy starts a proxy to the host of rawURL, which must name a
// port, and returns it with rawURL rewritten to go through it.
func listenProxy(rawURL string) (*proxy.Proxy, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Port() == "" {
		return nil, "", errors.New("the URL names no host:port to proxy")
	}
	p, err := proxy.Listen(u.Host)
	if err != nil {
		return nil, "", err
	}
	u.Host = p.Addr()
	return p, u.String(), nil
}

// Prefix returns the cluster's queue prefix.
func (fc *faultCluster) Prefix() string { return fc.prefix }

// Node returns slot i.
func (fc *faultCluster) Node(i int) *faultNode { return fc.nodes[i] }

// Nodes returns every slot.
func (fc *faultCluster) Nodes() []*faultNode { return fc.nodes }

// Start starts every slot that has no running process, waits until each
// is healthy, then until every ring holds exactly the running nodes.
func (fc *faultCluster) Start(t *testing.T, ctx context.Context) {
	t.Helper()
	var started []*faultNode
	for _, n := range fc.nodes {
		if !n.Running() {
			n.start(t)
			started = append(started, n)
		}
	}
	for _, n := range started {
		require.NoError(t, n.proc.awaitHealthy(ctx), "node %s", n.proc.label)
	}
	require.NoError(t, poll(ctx, fc.Agreed), "the rings agree")
}

// Terminate SIGTERMs every running node at once and waits for their
// orderly exits (bounded by timeout), so their op logs are complete.
func (fc *faultCluster) Terminate(t *testing.T, timeout time.Duration) {
	t.Helper()
	var running []*faultNode
	for _, n := range fc.nodes {
		if n.Running() {
			n.Resume(t)
			require.NoError(t, n.proc.cmd.Process.Signal(syscall.SIGTERM))
			running = append(running, n)
		}
	}
	for _, n := range running {
		require.NoError(t, n.proc.wait("SIGTERM", timeout))
		_, errOut := n.proc.output()
		assert.NoError(t, n.proc.waitErr, "node %s exits 0 after SIGTERM; stderr:\n%s", n.proc.label, tail(errOut, 2000))
	}
}

// Running returns the processes running now (paused ones included), in
// slot order.
func (fc *faultCluster) Running() []*child {
	var out []*child
	for _, n := range fc.nodes {
		if n.Running() {
			out = append(out, n.proc)
		}
	}
	return out
}

// Agreed checks that every running node serves, connected, with a ring
// of exactly the running nodes.
func (fc *faultCluster) Agreed() error { return agreeOn(fc.Running()) }

// Labels maps the UUID of every process ever started to its label (A1,
// B2: slot and run).
func (fc *faultCluster) Labels() map[string]string {
	m := map[string]string{}
	for _, n := range fc.nodes {
		for _, c := range n.runs {
			if c.id != "" {
				m[c.id] = c.label
			}
		}
	}
	return m
}

// OpLogs returns the op log of every process ever started.
func (fc *faultCluster) OpLogs() []string {
	var out []string
	for _, n := range fc.nodes {
		out = append(out, n.opLogs...)
	}
	return out
}

// Client returns a client of the cluster on its own connection to the
// broker, not through any node's proxy; it is closed when the test ends.
func (fc *faultCluster) Client(t *testing.T, ctx context.Context) *service.Client {
	t.Helper()
	return newClient(t, ctx, fc.broker, fc.prefix)
}

// start starts a new process in the slot, with the slot's skew and
// flags; the caller waits until it is healthy.
func (n *faultNode) start(t *testing.T) {
	t.Helper()
	fc := n.fc
	label := n.label + strconv.Itoa(len(n.runs)+1)
	opLog := filepath.Join(fc.dir, label+".ops.jsonl")
	args := []string{"-bus", n.busURL, "-db", n.dbURL, "-log-level", fc.opts.LogLevel, "-op-log", opLog, "-clock-skew", n.Skew.String()}
	if fc.opts.Heartbeat > 0 {
		args = append(args, "-heartbeat", fc.opts.Heartbeat.String())
	}
	if fc.opts.EvictAfter > 0 {
		args = append(args, "-evict-after", fc.opts.EvictAfter.String())
	}
	n.proc = fc.serve(t, label, append(args, n.Flags...), nil)
	n.runs = append(n.runs, n.proc)
	n.opLogs = append(n.opLogs, opLog)
	n.paused = false
}

// Proc returns the slot's current process, or nil.
func (n *faultNode) Proc() *child { return n.proc }

// ID returns the UUID of the slot's current process ("" before it
// printed it).
func (n *faultNode) ID() string {
	if n.proc == nil {
		return ""
	}
	return n.proc.id
}

// Label returns the label of the current process (A1, A2, …), or the
// slot's letter before the first start.
func (n *faultNode) Label() string {
	if n.proc == nil {
		return n.label
	}
	return n.proc.label
}

// Running reports whether the slot's current process has not exited.
func (n *faultNode) Running() bool {
	if n.proc == nil {
		return false
	}
	select {
	case <-n.proc.exited:
		return false
	default:
		return true
	}
}

// Pause stops the process with SIGSTOP.
func (n *faultNode) Pause(t *testing.T) {
	t.Helper()
	require.True(t, n.Running(), "node %s runs", n.Label())
	require.NoError(t, n.proc.cmd.Process.Signal(syscall.SIGSTOP))
	n.paused = true
}

// Resume continues a paused process with SIGCONT; it does nothing to a
// process that is not paused.
func (n *faultNode) Resume(t *testing.T) {
	t.Helper()
	if !n.paused {
		return
	}
	n.paused = false
	if n.Running() {
		require.NoError(t, n.proc.cmd.Process.Signal(syscall.SIGCONT))
	}
}

// Kill SIGKILLs the process and waits for its exit. Its op log may lack
// its last 50 ms.
func (n *faultNode) Kill(t *testing.T) {
	t.Helper()
	if n.proc == nil {
		return
	}
	require.NoError(t, n.proc.signal(syscall.SIGKILL, 10*time.Second))
	n.paused = false
}

// Terminate SIGTERMs the process (resuming it if paused) and waits for
// its orderly exit, bounded by timeout; it fails t unless it exits 0.
func (n *faultNode) Terminate(t *testing.T, timeout time.Duration) {
	t.Helper()
	if !n.Running() {
		return
	}
	n.Resume(t)
	require.NoError(t, n.proc.signal(syscall.SIGTERM, timeout))
	_, errOut := n.proc.output()
	assert.NoError(t, n.proc.waitErr, "node %s exits 0 after SIGTERM; stderr:\n%s", n.proc.label, tail(errOut, 2000))
}

// Restart terminates the slot's process if it runs, then starts a new
// one with the slot's Skew and Flags and waits until it is healthy; the caller
// waits for the rings (faultCluster.Agreed) if it needs them.
func (n *faultNode) Restart(t *testing.T, ctx context.Context) {
	t.Helper()
	n.Terminate(t, 20*time.Second)
	n.start(t)
	require.NoError(t, n.proc.awaitHealthy(ctx), "node %s", n.proc.label)
}

// describe is "A1 <uuid>, B1 <uuid>, …": the running nodes, for logs.
func (fc *faultCluster) describe() string {
	var parts []string
	for _, c := range fc.Running() {
		parts = append(parts, c.label+" "+c.id)
	}
	return strings.Join(parts, ", ")
}

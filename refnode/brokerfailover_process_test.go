package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/internal/rabbitcluster"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/service"
)

// The broker failover test of issue 27: a broker node lost under load.
const (
	bfClients      = 3                      // clients, each on its own broker connection, calling and sending
	bfVMsPerClient = 10                     // VMs each client's driver calls, its own
	bfCallRate     = 5                      // calls a second per client
	bfCallTimeout  = 5 * time.Second        // each call's deadline
	bfCallSlack    = time.Second            // a call returns by its deadline + this
	bfImages       = 4                      // one-way images per client
	bfSendEvery    = 300 * time.Millisecond // each client's pause between one-way sends
	bfSendTimeout  = 20 * time.Second       // each one-way message's deadline
	bfReconnect    = 20 * time.Second       // every cloudbus node on a survivor by then
	bfFreeze       = 15 * time.Second       // how long the broker node stays frozen
	bfReplicas     = 90 * time.Second       // every quorum queue of the prefix has 3 online members by then
	bfSplit        = 20 * time.Second       // a thawed node still split from the others then is started again
	bfBaseline     = 5 * time.Second        // the steady phase before the first fault
	bfSettle       = 60 * time.Second       // every acknowledged one-way message accounted for by then
)

// TestBrokerFailover runs three `refnode serve` processes (refnode's
// default heartbeat timing, so that an eviction is a real one) with
// quorum queues (-queue-type quorum) on the private 3-node RabbitMQ
// cluster of .ci/rabbitmq-cluster (net_ticktime 10 s in CI) and
// PostgreSQL, each node reaching every broker node through its own
// proxy. Three clients, each on its own broker connection, call VM
// operations through api.portal (5 a second each, 5 s deadline) and send
// acknowledged one-way SetImageName messages (service.Send, a unique name
// each, one every 300 ms per client, deadline 20 s) whose commits a
// database trigger counts (the chaos test's audit). After a 5 s steady
// phase, three faults, each followed by the broker node's return and a
// wait until the cluster runs its 3 nodes and every quorum queue of the
// prefix has its 3 members online:
//
//  1. the broker node holding the most client connections
//     (rabbitcluster.ConnectionsPerNode) is stopped gracefully, then
//     restarted;
//  2. the node leading <prefix>.message.api.portal is SIGKILLed, then
//     restarted;
//  3. the node leading api.portal's queue is frozen (SIGSTOP) for 15 s,
//     then thawed, after the cloudbus nodes connected to it were moved
//     to the others (their links to it cut, then healed): see below for
//     why; if it is still split from the others 20 s after the thaw, it
//     is stopped and started again.
//
// Per phase it prints a table row: the calls by outcome, the longest
// call, how many cloudbus nodes were on the faulted broker node and when
// every node was connected to a survivor (GET /status transport and
// broker, polled every 100 ms), the one-way messages acknowledged,
// handled (committed once), dead-lettered, applied twice and refused at
// send (a typed error: not acknowledged), and the time from the restart
// or thaw until the replicas were back. It asserts: every call returns by
// its deadline + 1 s with a reply or a typed error; every cloudbus node
// is on a survivor within 20 s of the fault; no cloudbus node is evicted
// (each keeps its UUID and epoch, every ring keeps 3 members, no
// eviction logged); every acknowledged one-way message committed exactly
// once or dead-lettered with a reason (lost 0, twice 0); the cluster
// whole and the replicas back within 90 s of the return.
//
// Measured on a quiet machine (2 cores), CI's cluster settings (net tick
// time 60 s): stop 3 cloudbus nodes on the stopped node, all on
// survivors after 0.6 s, 346 calls ok, 8 typed errors (timeout,
// unavailable), longest 5 s (a deadline), 223 one-way acknowledged and
// committed once, replicas back 17.4 s after the restart; kill 0 nodes
// on it, 296 ok, 6 timeouts, 183 one-way committed once, replicas back
// 15.5 s after the restart; freeze 168 ok, 119 typed errors (not_sent,
// timeout, unavailable) while the leader of api.portal's queue was
// frozen, 119 one-way committed once, replicas back 3.6 s after the
// thaw; 1018 calls and 573 one-way messages in 1 min 16 s. Under a load
// average of 6-29 (other tests) four earlier runs gave the same counts,
// stop 0.4-2.5 s to survivors, kill 0.1-2.6 s, replicas back 12-61 s.
//
// What the freeze does not test, and why: a cloudbus node connected to
// the frozen broker node notices within ProbeInterval + ProbeTimeout
// (1.25 s) and connects to another, but on RabbitMQ 3.x a frozen node
// blocks every queue declaration in the cluster (Mnesia) until it thaws
// or the others see it down (0.75-1.25 net tick time), so the node
// cannot declare its queues there meanwhile: measured 19.8 s down for a
// 15 s freeze, and 10.9-14.3 s with a 10 s tick. A node whose bus is
// down that long is evicted "cut off from the bus" by a peer whose bus
// is up (heartbeat rule 5, BusDownAfter 2 s): with 2 nodes on the frozen
// node, the third evicted both. Earlier, the renamed reply queue
// (amqpbus declares temporary queues under a new name after a
// reconnect) was refused too (405 RESOURCE_LOCKED) while the old one's
// connection, on the frozen node, seemed alive. With a 10 s tick, 3 of 4
// thawed nodes stayed split from the others (Mnesia:
// running_partitioned_network) until restarted.
//
// Every run: no call past its deadline + 1 s, none without a typed
// error; no acknowledged one-way message lost or applied twice.
func TestBrokerFailover(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Runs: "the broker failover test runs processes and a broker cluster's faults for about 3 min",
		FullSpeed: true, OnCluster: true, Timeout: 6 * time.Minute})
	testStart := time.Now()
	rc := rabbitcluster.FromEnv(t)
	require.NoError(t, rc.WaitRunning(ctx, rc.Nodes()), "the broker cluster is whole before the test")
	restore := &brokerRestore{rc: rc}
	t.Cleanup(restore.run)

	fc := newFaultCluster(t, ctx, broker, faultOptions{Nodes: 3, Name: "brokerfailover", Flags: []string{"-queue-type", "quorum"}, DB: onPostgres})
	fc.Start(t, ctx)
	ids := idsOf(fc.Running())
	cls := make([]*service.Client, bfClients)
	clientLogs := make([]string, bfClients)
	for i := range cls {
		cls[i], clientLogs[i] = loggedClient(t, ctx, broker, fc.Prefix(), fmt.Sprintf("client%d", i)) // each connects to a broker node at random
	}
	vms := createVMs(t, ctx, cls[0], bfClients*bfVMsPerClient)
	images := map[string]int{}
	imageIDs := make([]string, bfClients*bfImages)
	for i := range imageIDs {
		imageIDs[i] = message.NewUUID()
		_, err := service.Call[api.ImageReply](ctx, cls[0], api.AddImage{UUID: imageIDs[i], Name: "start"})
		require.NoError(t, err, "add a one-way image")
		images[imageIDs[i]] = i
	}
	audit := newChaosAudit(fc.tables.db, fc.tables.base)
	require.NoError(t, audit.install(ctx))
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		assert.NoError(t, audit.remove(cctx), "remove the audit trigger")
	})
	dead := newDeadLetters(t, ctx, broker, fc.Prefix())
	watch := startStatusWatch(fc)
	t.Cleanup(watch.stop)
	t.Logf("3 nodes serving with quorum queues %s after the test began: %s", since(testStart), fc.describe())

	// The load: a driver and a one-way sender per client.
	var drivers []*vmDriver
	for i, cl := range cls {
		d := startDriver(cl, vms[i*bfVMsPerClient:(i+1)*bfVMsPerClient], driverOptions{Rate: bfCallRate, Timeout: bfCallTimeout})
		drivers = append(drivers, d)
		t.Cleanup(d.stop) // before the clients close
	}
	senders := startOneWaySenders(cls, imageIDs)
	t.Cleanup(senders.stop)

	var phases []*bfPhase
	reported := false
	// report prints the table, per phase, and returns every call.
	report := func(rows []auditRow, sends []chaosSend) []callRecord {
		reported = true
		var calls []callRecord
		for _, d := range drivers {
			calls = append(calls, d.Calls()...)
		}
		t.Logf("| phase | broker node | calls by outcome | longest call | nodes on it / all on survivors after | one-way acked / handled / dead / twice / refused at send | replicas back after |")
		t.Logf("| --- | --- | --- | --- | --- | --- | --- |")
		for _, p := range phases {
			end := p.end
			if end.IsZero() {
				end = time.Now()
			}
			pc := callsIn(calls, p.start, end)
			f := analyzeOneWay(sendsIn(sends, p.start, end), rows, images, dead.reason, nil)
			target, recon, repl := "-", "-", "-"
			if p.target >= 0 {
				target = fmt.Sprintf("%d (%s)", p.target+1, p.detail)
				recon = fmt.Sprintf("%d / %s (connections lost %d)", p.onTarget, ms(p.reconnected), p.lost)
			}
			if !p.replicas.IsZero() {
				repl = fmt.Sprintf("%s after the %s (%d queues; %s after the fault)", ms(p.replicas.Sub(p.back)),
					map[bool]string{true: "thaw", false: "restart"}[p.name == "freeze"], p.queues, ms(p.replicas.Sub(p.fault)))
				if p.splitHealed {
					repl += fmt.Sprintf("; the thawed node stayed split %s and was started again", bfSplit)
				}
			}
			t.Logf("| %s | %s | %s | %s | %s | %d / %d / %d / %d / %d | %s |", p.name, target, outcomes(callOutcomes(pc)), ms(longest(pc)), recon,
				f.sent, f.committed, f.dead, len(f.twice), f.refusedAtSend, repl)
		}
		return calls
	}
	defer func() {
		if t.Failed() {
			dumpNodeLogs(t, fc, clientLogs)
		}
		if !reported { // a require failed: the figures so far
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer rcancel()
			rows, _ := audit.rows(rctx)
			report(rows, senders.records())
		}
	}()

	prefixQueues := fc.Prefix() + "."
	portal := fc.Prefix() + ".message.api.portal"
	phases = append(phases, &bfPhase{name: "steady", start: time.Now(), target: -1})
	time.Sleep(bfBaseline) // the steady phase's load runs meanwhile: a length of load, not a wait for a state
	for _, fault := range []string{"stop", "kill", "freeze"} {
		p := &bfPhase{name: fault, start: time.Now()}
		phases[len(phases)-1].end = p.start
		phases = append(phases, p)
		switch fault {
		case "stop":
			conns, err := rc.ConnectionsPerNode(ctx)
			require.NoError(t, err, "connections per broker node")
			p.target = mostConnections(conns)
			var per []string
			for i := range rc.Nodes() {
				per = append(per, fmt.Sprintf("%d on %d", conns[i], i+1))
			}
			p.detail = "most connections: " + strings.Join(per, ", ")
		default:
			var leader int
			require.NoError(t, poll(ctx, func() error {
				var err error
				leader, err = rc.Leader(ctx, portal)
				return err
			}), "the leader of %s", portal)
			p.target, p.detail = leader, "leader of api.portal"
			if fault == "freeze" {
				// Move the cloudbus nodes off the node to freeze first
				// (their links to it cut, then healed): on RabbitMQ 3.x a
				// frozen node blocks every queue declaration in the
				// cluster (Mnesia) until it thaws or the others see it
				// down, so a node that must reconnect cannot declare its
				// queues meanwhile (measured: 19.8 s down for a 15 s
				// freeze), and a peer whose bus is up evicts it as cut
				// off from the bus. The freeze then tests what it can:
				// the queues it leads stalled, then back.
				moved := 0
				for i, s := range watch.last() {
					if s.broker == p.target {
						fc.Nodes()[i].BusAll[p.target].Cut()
						moved++
					}
				}
				from := time.Now()
				mctx, mcancel := context.WithTimeout(ctx, bfReconnect)
				err := poll(mctx, func() error { return watch.onSurvivors(from, p.target) })
				mcancel()
				require.NoError(t, err, "the cloudbus nodes moved off broker node %d before its freeze", p.target)
				for _, n := range fc.Nodes() {
					n.BusAll[p.target].Heal()
				}
				p.detail += fmt.Sprintf(", %d cloudbus nodes moved off it first", moved)
			}
		}
		before := watch.last()
		p.fault = time.Now()
		switch fault {
		case "stop":
			restore.down(p.target)
			require.NoError(t, rc.StopNode(ctx, p.target), "stop broker node %d", p.target)
		case "kill":
			restore.down(p.target)
			require.NoError(t, rc.Kill(ctx, p.target), "kill broker node %d", p.target)
		case "freeze":
			restore.frozen(p.target)
			require.NoError(t, rc.Freeze(ctx, p.target), "freeze broker node %d", p.target)
		}
		p.injected = time.Now()
		for _, s := range before {
			if s.broker == p.target {
				p.onTarget++
			}
		}
		rctx, rcancel := context.WithTimeout(ctx, bfReconnect)
		err := poll(rctx, func() error { return watch.onSurvivors(p.fault, p.target) })
		rcancel()
		p.reconnected = watch.reconnectedAt(p.fault, p.target)
		assert.NoError(t, err, "%s: every cloudbus node is on a surviving broker node within %s", fault, bfReconnect)
		if fault == "freeze" {
			if wait := bfFreeze - time.Since(p.fault); wait > 0 {
				time.Sleep(wait) // the freeze lasts its length
			}
			p.back = time.Now()
			require.NoError(t, rc.Thaw(ctx, p.target), "thaw broker node %d", p.target)
		} else {
			p.back = time.Now()
			require.NoError(t, rc.Restart(ctx, p.target), "restart broker node %d", p.target)
			restore.up(p.target)
		}
		p.restarted = time.Now()
		qctx, qcancel := context.WithTimeout(ctx, bfReplicas)
		if fault == "freeze" {
			// The thawed node gets bfSplit to rejoin by itself.
			wctx, wcancel := context.WithTimeout(qctx, bfSplit)
			err = rc.WaitRunning(wctx, rc.Nodes())
			wcancel()
		}
		var qs []rabbitcluster.Queue
		if fault != "freeze" {
			err = rc.WaitRunning(qctx, rc.Nodes())
		}
		// A partition after a thaw shows here: each side runs fewer.
		if err != nil && fault == "freeze" && qctx.Err() == nil {
			// A thawed node that never saw itself in a minority stays split
			// from the others (pause_minority acts only on a minority; Mnesia
			// reports running_partitioned_network): start it again.
			p.splitHealed = true
			if err = rc.StopNode(qctx, p.target); err == nil {
				if err = rc.Restart(qctx, p.target); err == nil {
					err = rc.WaitRunning(qctx, rc.Nodes())
				}
			}
		}
		if err == nil {
			err = poll(qctx, func() error {
				var err error
				if qs, err = rc.Queues(qctx, prefixQueues); err != nil {
					return err
				}
				return replicasWhole(qs, rc.Nodes())
			})
		}
		qcancel()
		p.replicas = time.Now()
		p.queues = len(qs)
		require.NoError(t, err, "%s: the broker cluster is whole and every quorum queue of the prefix has its %d members online within %s of the return of broker node %d",
			fault, rc.Nodes(), bfReplicas, p.target)
		restore.thawed(p.target)
		// The load answers again on every VM before the next fault.
		for i, d := range drivers {
			_, err := d.awaitAnswered(ctx, p.replicas, 30*time.Second)
			if !assert.NoError(t, err, "%s: client %d's VMs answer again", fault, i) {
				t.Logf("client %d's log:\n%s", i, tail(readLog(clientLogs[i]), 6000))
			}
		}
		p.lost = watch.lostSince(before)
	}
	phases[len(phases)-1].end = time.Now()
	senders.stop()
	for _, d := range drivers {
		d.stop()
	}
	watch.stop()
	sends := senders.records()

	// Every acknowledged one-way message committed once or dead-lettered.
	var rows []auditRow
	actx, acancel := context.WithTimeout(ctx, bfSettle)
	err := poll(actx, func() error {
		var err error
		if rows, err = audit.rows(actx); err != nil {
			return err
		}
		if f := analyzeOneWay(sends, rows, images, dead.reason, nil); len(f.lost) > 0 {
			return fmt.Errorf("%d acknowledged one-way messages neither committed nor dead-lettered yet, e.g. %s", len(f.lost), f.lost[0])
		}
		return nil
	})
	acancel()
	assert.NoError(t, err, "every acknowledged one-way message runs or waits in the dead-letter queue within %s", bfSettle)
	all := analyzeOneWay(sends, rows, images, dead.reason, nil)

	calls := report(rows, sends)

	// Calls: each by its deadline, with a reply or a typed error.
	for _, c := range calls {
		if c.Took() > bfCallTimeout+bfCallSlack {
			t.Errorf("call %s (%s %s) took %s, past its deadline %s + %s: %s", c.OpID, c.Kind, c.VM, ms(c.Took()), bfCallTimeout, bfCallSlack, c.Err)
		}
		if c.Outcome == "unknown" {
			t.Errorf("call %s (%s %s) failed without a typed error: %s", c.OpID, c.Kind, c.VM, c.Err)
		}
	}
	// One-way: none lost, none twice, none late, none foreign.
	for what, list := range all.violations() {
		assert.Empty(t, list, "%s", what)
	}
	for _, id := range dead.ids() {
		assert.NotEmpty(t, dead.reason(id), "a dead letter says why")
	}
	// No cloudbus node evicted.
	for i, n := range fc.Nodes() {
		assert.True(t, n.Running(), "node %s runs", n.Label())
		assert.Equal(t, ids[i], n.ID(), "node %s keeps its UUID", n.Label())
		for _, c := range fc.Running() {
			assert.Empty(t, c.logLines("evicted a node", ids[i]), "node %s never evicted %s", c.label, n.Label())
		}
	}
	for _, v := range watch.violations(ids) {
		t.Error(v)
	}
	assert.NoError(t, fc.Agreed(), "the rings agree on the three nodes at the end")
	t.Logf("%d calls, %d one-way messages acknowledged (%d committed once, %d dead-lettered: %v; %d refused at send), applied twice %d, lost %d; the test took %s",
		len(calls), all.sent, all.committed, all.dead, all.reasons, all.refusedAtSend, len(all.twice), len(all.lost), since(testStart))
}

// bfPhase is one phase of the broker failover test: the steady load
// before the first fault, then each fault until the next.
type bfPhase struct {
	name        string
	start, end  time.Time
	target      int    // the broker node faulted, -1 for none
	detail      string // why that node
	fault       time.Time
	injected    time.Time     // the fault's command returned
	onTarget    int           // cloudbus nodes connected to the target before the fault
	lost        uint64        // broker connections the cloudbus nodes lost in the phase
	back        time.Time     // the restart or thaw began
	restarted   time.Time     // it returned
	replicas    time.Time     // every quorum queue whole again
	queues      int           // quorum queues of the prefix
	reconnected time.Duration // from the fault until every cloudbus node was on a survivor
	splitHealed bool          // the thawed node stayed split and was started again
}

// mostConnections returns the broker node with the most connections
// (the lowest index among equals).
func mostConnections(conns map[int]int) int {
	best := -1
	for i, n := range conns {
		if best < 0 || n > conns[best] || (n == conns[best] && i < best) {
			best = i
		}
	}
	return best
}

// replicasWhole checks that every queue has n members, all online, and a
// leader.
func replicasWhole(qs []rabbitcluster.Queue, n int) error {
	if len(qs) == 0 {
		return fmt.Errorf("no quorum queue of the prefix listed")
	}
	var short []string
	for _, q := range qs {
		if len(q.Members) != n || len(q.Online) != n || q.Leader < 0 {
			short = append(short, fmt.Sprintf("%s (leader %d, members %v, online %v)", q.Name, q.Leader, q.Members, q.Online))
		}
	}
	if len(short) > 0 {
		return fmt.Errorf("%d of %d quorum queues not whole: %s", len(short), len(qs), strings.Join(short, "; "))
	}
	return nil
}

// brokerRestore brings back, at the end of the test, a broker node the
// test stopped, killed or froze, so that the next test finds the cluster
// whole. Only the test's goroutine uses it.
type brokerRestore struct {
	rc     *rabbitcluster.Cluster
	isDown map[int]bool
	isFroz map[int]bool
}

func (r *brokerRestore) down(i int) {
	if r.isDown == nil {
		r.isDown = map[int]bool{}
	}
	r.isDown[i] = true
}
func (r *brokerRestore) up(i int) { delete(r.isDown, i) }
func (r *brokerRestore) frozen(i int) {
	if r.isFroz == nil {
		r.isFroz = map[int]bool{}
	}
	r.isFroz[i] = true
}
func (r *brokerRestore) thawed(i int) { delete(r.isFroz, i) }

func (r *brokerRestore) run() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range r.isFroz {
		_ = r.rc.Thaw(ctx, i)
	}
	for i := range r.isDown {
		_ = r.rc.Restart(ctx, i)
	}
	if len(r.isFroz)+len(r.isDown) == 0 {
		return
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if r.rc.WaitRunning(wctx, r.rc.Nodes()) == nil {
		return
	}
	// A thawed node left split from the others: start it again.
	for i := range r.isFroz {
		_ = r.rc.StopNode(ctx, i)
		_ = r.rc.Restart(ctx, i)
	}
	_ = r.rc.WaitRunning(ctx, r.rc.Nodes())
}

// callsIn returns the calls invoked in [from, to).
func callsIn(calls []callRecord, from, to time.Time) []callRecord {
	var out []callRecord
	for _, c := range calls {
		if !c.Invoke.Before(from) && c.Invoke.Before(to) {
			out = append(out, c)
		}
	}
	return out
}

// sendsIn returns the one-way sends begun in [from, to).
func sendsIn(sends []chaosSend, from, to time.Time) []chaosSend {
	var out []chaosSend
	for _, s := range sends {
		if at := time.Unix(0, s.Sent); !at.Before(from) && at.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// callOutcomes counts the calls by outcome, as outcomes prints them.
func callOutcomes(calls []callRecord) map[string]int {
	by := map[string]int{}
	for _, c := range calls {
		by[c.Outcome]++
	}
	return by
}

// longest returns the longest call's duration.
func longest(calls []callRecord) time.Duration {
	var m time.Duration
	for _, c := range calls {
		m = max(m, c.Took())
	}
	return m
}

// oneWaySenders send acknowledged one-way SetImageName messages, one
// goroutine per client, each on its own images, until stop.
type oneWaySenders struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	sends  []chaosSend
}

// startOneWaySenders starts a sender per client; client k writes the
// images imageIDs[k*bfImages:(k+1)*bfImages] in turn, a unique name each
// time, every bfSendEvery, each message with the deadline bfSendTimeout.
func startOneWaySenders(cls []*service.Client, imageIDs []string) *oneWaySenders {
	ctx, cancel := context.WithCancel(context.Background())
	s := &oneWaySenders{cancel: cancel}
	run := randomHex(3)
	for k, cl := range cls {
		s.wg.Go(func() {
			for seq := 0; ; seq++ {
				select {
				case <-ctx.Done():
					return
				case <-time.After(bfSendEvery):
				}
				img := k*bfImages + seq%bfImages
				rec := chaosSend{Image: img, Client: k, Seq: seq, Name: fmt.Sprintf("bf%s.%d.%d", run, k, seq),
					OpID: fmt.Sprintf("bf-%s-c%d-%d", run, k, seq), MsgID: message.NewUUID()}
				sctx, scancel := context.WithTimeout(context.Background(), bfSendTimeout)
				deadline, _ := sctx.Deadline()
				rec.Sent, rec.Deadline = time.Now().UnixNano(), deadline.UnixNano()
				err := service.Send(sctx, cl, api.SetImageName{UUID: imageIDs[img], Name: rec.Name},
					bus.WithID(rec.MsgID), bus.WithTimeout(bfSendTimeout), bus.WithHeader(HeaderOp, rec.OpID))
				rec.Done = time.Now().UnixNano()
				scancel()
				if err != nil {
					rec.Err = outcomeOf(err) + ": " + err.Error()
				}
				s.mu.Lock()
				s.sends = append(s.sends, rec)
				s.mu.Unlock()
			}
		})
	}
	return s
}

// stop stops the senders and waits for their last sends. Idempotent.
func (s *oneWaySenders) stop() {
	s.cancel()
	s.wg.Wait()
}

// records returns a copy of the sends so far.
func (s *oneWaySenders) records() []chaosSend {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sends)
}

// statusSample is what a cloudbus node's GET /status said at a moment.
type statusSample struct {
	at        time.Time
	ok        bool   // the node answered
	node      string // its UUID
	epoch     int64
	transport string
	broker    int // the broker node it is connected to, -1 for none or unknown
	lost      uint64
	ring      int // members in its ring
}

// statusWatch polls every node's GET /status every 100 ms in a goroutine
// of its own, until stop, and keeps every sample.
type statusWatch struct {
	fc     *faultCluster
	ports  []map[string]int // per cloudbus node: proxy port -> broker node index
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	s      [][]statusSample // per node, in time order
}

func startStatusWatch(fc *faultCluster) *statusWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &statusWatch{fc: fc, cancel: cancel, done: make(chan struct{}), s: make([][]statusSample, len(fc.Nodes()))}
	for _, n := range fc.Nodes() {
		m := map[string]int{}
		for i, p := range n.BusAll {
			m[portOf(p.Addr())] = i
		}
		w.ports = append(w.ports, m)
	}
	procs := make([]*child, len(fc.Nodes()))
	for i, n := range fc.Nodes() {
		procs[i] = n.Proc()
	}
	go func() {
		defer close(w.done)
		for {
			var wg sync.WaitGroup
			for i, c := range procs {
				wg.Go(func() { w.sample(i, c) })
			}
			wg.Wait()
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *statusWatch) sample(i int, c *child) {
	st, err := c.status()
	s := statusSample{at: time.Now(), ok: err == nil, broker: -1}
	if err == nil {
		s.node, s.epoch, s.transport, s.lost, s.ring = st.Node, st.Epoch, st.Transport, st.ConnectionsLost, len(st.Ring.Members)
		if u, err := url.Parse(st.Broker); err == nil && st.Broker != "" {
			if b, ok := w.ports[i][u.Port()]; ok {
				s.broker = b
			}
		}
	}
	w.mu.Lock()
	w.s[i] = append(w.s[i], s)
	w.mu.Unlock()
}

// stop stops the polling. Idempotent.
func (w *statusWatch) stop() {
	w.cancel()
	<-w.done
}

// last returns each node's last answered sample.
func (w *statusWatch) last() []statusSample {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]statusSample, len(w.s))
	for i, ss := range w.s {
		out[i] = statusSample{broker: -1}
		for j := len(ss) - 1; j >= 0; j-- {
			if ss[j].ok {
				out[i] = ss[j]
				break
			}
		}
	}
	return out
}

// onSurvivor reports whether a sample shows its node connected to a
// broker node other than target.
func (s statusSample) onSurvivor(target int) bool {
	return s.ok && s.transport == "connected" && s.broker >= 0 && s.broker != target
}

// onSurvivors checks that every node's last sample taken after from
// shows it connected to a broker node other than target.
func (w *statusWatch) onSurvivors(from time.Time, target int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, ss := range w.s {
		if len(ss) == 0 || ss[len(ss)-1].at.Before(from) {
			return fmt.Errorf("node %d has no status since the fault", i)
		}
		if s := ss[len(ss)-1]; !s.onSurvivor(target) {
			return fmt.Errorf("node %d: transport %q on broker node %d", i, s.transport, s.broker)
		}
	}
	return nil
}

// reconnectedAt returns how long after from the last node came onto a
// survivor for good (as far as the samples go): for each node, the first
// sample on a survivor after its last sample that was not.
func (w *statusWatch) reconnectedAt(from time.Time, target int) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var worst time.Duration
	for _, ss := range w.s {
		var at time.Time
		for _, s := range ss {
			if s.at.Before(from) {
				continue
			}
			switch {
			case !s.onSurvivor(target):
				at = time.Time{}
			case at.IsZero():
				at = s.at
			}
		}
		if !at.IsZero() {
			worst = max(worst, at.Sub(from))
		}
	}
	return worst
}

// lostSince returns the broker connections the nodes lost since the
// samples before.
func (w *statusWatch) lostSince(before []statusSample) uint64 {
	var n uint64
	for i, s := range w.last() {
		if s.ok && before[i].ok && s.lost >= before[i].lost {
			n += s.lost - before[i].lost
		}
	}
	return n
}

// violations lists the samples that show a node evicted or replaced: a
// UUID other than ids[i], another epoch than its first, a ring without
// three members; and a node that stopped answering.
func (w *statusWatch) violations(ids []string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for i, ss := range w.s {
		var epoch int64
		bad := 0
		for _, s := range ss {
			if !s.ok {
				bad++
				if bad == 1 {
					out = append(out, fmt.Sprintf("node %d did not answer GET /status at %s", i, s.at.Format(clockFormat)))
				}
				continue
			}
			if epoch == 0 {
				epoch = s.epoch
			}
			switch {
			case s.node != ids[i]:
				out = append(out, fmt.Sprintf("node %d is %s at %s, not %s", i, s.node, s.at.Format(clockFormat), ids[i]))
			case s.epoch != epoch:
				out = append(out, fmt.Sprintf("node %d's epoch is %d at %s, not %d: it registered again", i, s.epoch, s.at.Format(clockFormat), epoch))
			case s.ring != len(ids):
				out = append(out, fmt.Sprintf("node %d's ring has %d members at %s, not %d", i, s.ring, s.at.Format(clockFormat), len(ids)))
			default:
				continue
			}
			if len(out) > 20 {
				return out
			}
		}
	}
	return out
}

// loggedClient is newClient with the client's and its transport's logs
// (debug level) in a file of the test's, whose path it returns.
func loggedClient(t *testing.T, ctx context.Context, broker, prefix, name string) (*service.Client, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() }) // after the client's Close: cleanups run last-in first-out
	log := slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})).With("client", name)
	tr, err := amqpbus.Dial(ctx, amqpbus.Config{URL: broker, ConnectionName: "refnode broker failover " + name, Logger: log})
	require.NoError(t, err)
	reg := message.NewRegistry()
	require.NoError(t, api.Register(reg))
	cl, err := service.NewClient(ctx, service.ClientConfig{Transport: tr, Prefix: prefix, Registry: reg, OwnTransport: true, Logger: log})
	if err != nil {
		_ = tr.Close()
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return cl, path
}

// readLog returns a log file's text, or why it could not be read.
func readLog(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// bfLogsVar names a directory that, when set, receives the nodes' and
// clients' whole logs of a failed run.
const bfLogsVar = "CLOUDBUS_BROKER_FAILOVER_LOGS"

// dumpNodeLogs logs the warnings and errors of every node of a failed
// run, and copies the whole logs into $CLOUDBUS_BROKER_FAILOVER_LOGS if
// set.
func dumpNodeLogs(t *testing.T, fc *faultCluster, clientLogs []string) {
	dir := os.Getenv(bfLogsVar)
	for _, c := range fc.Running() {
		_, errOut := c.output()
		var lines []string
		for _, l := range strings.Split(errOut, "\n") {
			if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
				lines = append(lines, l)
			}
		}
		t.Logf("node %s: %d warnings and errors, the last 40:\n%s", c.label, len(lines), strings.Join(lines[max(0, len(lines)-40):], "\n"))
		if dir != "" {
			_ = os.WriteFile(filepath.Join(dir, c.label+".log"), []byte(errOut), 0o644)
		}
	}
	if dir != "" {
		for i, p := range clientLogs {
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("client%d.log", i)), []byte(readLog(p)), 0o644)
		}
		t.Logf("the whole logs are in %s", dir)
	}
}

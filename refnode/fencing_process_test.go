package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/amqpbus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/service"
)

// The fencing test: a node that lost ownership while paused writes
// nothing, and a message delivered three times runs once.
const (
	// fnStall is node X's -test-stall-vm-write: its first VM operation
	// holds its fenced transaction this long after the fence's check. It
	// is shorter than the pause (the test resumes X only after it has
	// passed), so X goes on to its hypervisor call and its write as soon
	// as it runs again, before or while it learns of its eviction.
	fnStall = 2 * time.Second
	// fnCallTimeout is the deadline of the stalled StartVm: it outlives
	// the pause, so X's handler still has a live ctx when X resumes.
	fnCallTimeout = 30 * time.Second
	// fnEnvelopeTimeout is the deadline of the duplicated CreateVm: its
	// third delivery waits in a dead node's queue until a survivor drains
	// it.
	fnEnvelopeTimeout = 60 * time.Second
	// fnBound bounds every wait that is not an acceptance figure;
	// generous, as the machine is shared.
	fnBound = 30 * time.Second
)

// TestFencingUnderFaults runs three `refnode serve` processes on RabbitMQ
// and PostgreSQL with the default heartbeat timing (beat 500 ms, evict
// 3 s), each through its own proxies, in two scenarios:
//
//   - pause: node X (slot A, started with -test-stall-vm-write) stalls
//     in its first VM operation, a StartVm, after the fence's check and
//     before its hypervisor call and its write, holding the transaction
//     open; the test pauses it (SIGSTOP) until its peers evicted it and
//     drained its queues (the StartVm's redelivery starts the VM on the
//     new owner) and the new owner stopped the VM (the test's StopVm,
//     and StartVm first if the VM is not running, through api.portal),
//     then resumes it (SIGCONT) once its stall is over. X's write is
//     refused with a *fence.StaleError (message.ErrNotOwner): the test
//     reads PostgreSQL and finds no VM row changed after the resume, the
//     VM stopped, and its fence token held by the new owner, one above
//     the last committed token (X's claim never committed). X rejoins
//     every ring with a new epoch.
//   - duplicate: one CreateVm envelope, without a VM UUID, is published
//     twice to api.portal, then once more straight into the vmInstance
//     queue of node K (the node that ran it first) while K is paused; K
//     is killed, a survivor drains its queue and re-routes the message.
//     The three replies are equal, and PostgreSQL holds one VM of that
//     name.
//
// It prints the figures: how long the peers took to evict X, how long the
// new owner's first write of the VM took (it may wait for X's open
// transaction), X's rejoin, and the replies' times.
func TestFencingUnderFaults(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Runs: "the fencing test runs processes for about half a minute", FullSpeed: true, Timeout: 3 * time.Minute})
	testStart := time.Now()
	fc := newFaultCluster(t, ctx, broker, faultOptions{Nodes: 3, Name: "fencing"})
	x := fc.Node(0)
	x.Flags = append(x.Flags, "-test-stall-vm-write", fnStall.String())
	fc.Start(t, ctx)
	t.Logf("3 nodes serving and agreeing %s after the test began: %s; node X is %s, stalling its first VM write for %s",
		since(testStart), fc.describe(), x.Label(), fnStall)
	cl := fc.Client(t, ctx)
	img, err := service.Call[api.ImageReply](ctx, cl, api.AddImage{UUID: message.NewUUID(), Name: "fencing"})
	require.NoError(t, err, "add an image")
	_, err = service.Call[api.HostReply](ctx, cl, api.AddHost{UUID: message.NewUUID(), Address: "10.0.2.1"})
	require.NoError(t, err, "add a host")
	f := &fencingRun{fc: fc, cl: cl, jan: newJanitor(t, broker), image: img.Image.UUID}

	t.Run("pause", func(t *testing.T) { f.pause(t, ctx) })
	t.Run("duplicate", func(t *testing.T) { f.duplicate(t, ctx) })
	t.Logf("the fencing test took %s", since(testStart))
}

// fencingRun is the state the scenarios share. Only the test's goroutine
// uses it.
type fencingRun struct {
	fc    *faultCluster
	cl    *service.Client
	jan   *janitor
	image string // the VMs' image
}

// pause is the first scenario: node X paused inside its fenced write past
// its eviction, then resumed.
func (f *fencingRun) pause(t *testing.T, ctx context.Context) {
	fc := f.fc
	x := fc.Node(0)
	xid := x.ID()
	before, err := x.Proc().status()
	require.NoError(t, err)
	peers := othersThan(fc.Running(), xid)

	// A VM that X owns: its UUID picked on the ring of the running nodes,
	// and checked by the node GetVm's reply names.
	r := ringOver(t, idsOf(fc.Running()))
	vm := message.NewUUID()
	for mustOwner(t, r, vm) != xid {
		vm = message.NewUUID()
	}
	_, err = service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{UUID: vm, Name: "fencing-paused", ImageUUID: f.image})
	require.NoError(t, err, "create the VM")
	got, err := service.Call[api.VmReply](ctx, f.cl, api.GetVm{UUID: vm})
	require.NoError(t, err)
	require.Equal(t, xid, got.Node, "node X (%s) owns VM %s", x.Label(), vm)
	require.Equal(t, cloud.VMCreated, got.VM.State)

	// The StartVm that X stalls in, through api.portal, with a deadline
	// that outlives the pause. Its outcome may be an error: node_left
	// (the portal's node evicted X while it waited), or the reply of its
	// redelivery on the new owner.
	op := "fence-" + randomHex(3)
	type outcome struct {
		rep  api.VmReply
		err  error
		took time.Duration
	}
	stalled := make(chan outcome, 1)
	sent := time.Now()
	go func() {
		cctx, cancel := context.WithTimeout(ctx, fnCallTimeout)
		defer cancel()
		rep, err := service.Call[api.VmReply](cctx, f.cl, api.StartVm{UUID: vm}, bus.WithTimeout(fnCallTimeout), bus.WithHeader(HeaderOp, op))
		stalled <- outcome{rep, err, time.Since(sent)}
	}()
	// Receive it whatever happens, so that no goroutine outlives the test.
	var first outcome
	received := false
	awaitStalled := func(bound time.Duration) bool {
		if received {
			return true
		}
		select {
		case first = <-stalled:
			received = true
		case <-time.After(bound):
		}
		return received
	}
	defer awaitStalled(fnCallTimeout)

	var holding logLine
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = poll(bctx, func() error {
		ls := x.Proc().logLines("test stall: holding", "vm="+vm)
		if len(ls) == 0 {
			return errors.New("node X has not logged its stall yet")
		}
		holding = ls[0]
		return nil
	})
	cancel()
	require.NoError(t, err, "node X stalls in the StartVm; its log:\n%s", logTail(x.Proc(), sent, 20))
	x.Pause(t)
	paused := time.Now()
	require.True(t, paused.Before(holding.At.Add(fnStall)), "node X is paused within its stall (%s after it began)", ms(paused.Sub(holding.At)))
	t.Logf("node %s stalled in StartVm %s (msg op %s) at %s, paused %s later",
		x.Label(), vm, op, holding.At.Format(clockFormat), ms(paused.Sub(holding.At)))

	// While X is paused inside its transaction, nothing of it is
	// committed: the VM's token row is as it was (none: nobody wrote the
	// VM yet).
	tokBefore, hadToken := f.token(t, ctx, vm)
	assert.False(t, hadToken, "no token row for VM %s while X's first write of it is uncommitted; found %+v", vm, tokBefore)

	// The peers evict X: their rings no longer list it.
	bctx, cancel = context.WithTimeout(ctx, fnBound)
	err = poll(bctx, func() error {
		for _, c := range peers {
			st, err := c.status()
			if err != nil {
				return err
			}
			if slices.Contains(st.Ring.Members, xid) {
				return fmt.Errorf("node %s's ring still lists X", c.label)
			}
		}
		return nil
	})
	cancel()
	require.NoError(t, err, "the peers evict the paused node X")
	evicted := time.Now()
	ev, by, ok := firstLogged(peers, "evicted a node", xid)
	if ok {
		evicted = ev.At
	}
	evictedBy := "its peers"
	if by != nil {
		evictedBy = by.label
	}

	// The stalled call has ended (node_left at the eviction, or the reply
	// of its redelivery), and X's queues were drained into the new owners
	// and deleted: whatever the StartVm's redelivery does on the new owner
	// is done before the test's own calls run there.
	require.True(t, awaitStalled(fnCallTimeout), "the stalled StartVm ends by its deadline")
	stalledText := "ok, the VM " + string(first.rep.VM.State) + " on " + fc.Labels()[first.rep.Node]
	if first.err != nil {
		stalledText = outcomeOf(first.err) + ": " + first.err.Error()
	}
	bctx, cancel = context.WithTimeout(ctx, fnBound)
	var states []queueState
	err = pollEvery(bctx, 100*time.Millisecond, func() error {
		var err error
		if states, err = f.jan.inspectAll(nodeQueues(fc.Prefix(), xid)); err == nil && len(existing(states)) > 0 {
			err = fmt.Errorf("%d queues of X left, e.g. %s", len(existing(states)), existing(states)[0])
		}
		return err
	})
	cancel()
	require.NoError(t, err, "the survivors drain and delete X's queues; their log:\n%s", linesText(drainLines(peers, paused)))

	// The new owner's writes: start the VM (unless the StartVm's
	// redelivery did), then stop it.
	cur, err := service.Call[api.VmReply](ctx, f.cl, api.GetVm{UUID: vm})
	require.NoError(t, err, "GetVm after the takeover")
	owner := cur.Node
	require.NotEqual(t, xid, owner, "a peer owns VM %s now", vm)
	ownerProc := peers[slices.IndexFunc(peers, func(c *child) bool { return c.id == owner })]
	var writes []string
	if cur.VM.State != cloud.VMRunning {
		took, err := f.operate(ctx, api.StartVm{UUID: vm}, owner, cloud.VMRunning)
		require.NoError(t, err, "the new owner starts the VM; its log:\n%s", logTail(ownerProc, paused, 20))
		writes = append(writes, "StartVm "+ms(took))
	}
	took, err := f.operate(ctx, api.StopVm{UUID: vm}, owner, cloud.VMStopped)
	require.NoError(t, err, "the new owner stops the VM; its log:\n%s", logTail(ownerProc, paused, 20))
	writes = append(writes, "StopVm "+ms(took))
	firstWrite := firstVMWrite(ownerProc, vm)

	ownerSt, err := ownerProc.status()
	require.NoError(t, err)
	tokTaken, ok := f.token(t, ctx, vm)
	require.True(t, ok, "the new owner's write made VM %s's token row", vm)
	rowsPaused := f.vmRows(t, ctx)

	// Resume X once its stall is over: it goes on to its hypervisor call
	// and its write at once.
	sleepUntil(ctx, holding.At.Add(fnStall+100*time.Millisecond))
	x.Resume(t)
	resumed := time.Now()
	bctx, cancel = context.WithTimeout(ctx, fnBound)
	var epoch int64
	err = poll(bctx, func() error {
		if len(x.Proc().logLines("test stall: over", "vm="+vm)) == 0 {
			return errors.New("node X's stall is not over")
		}
		st, err := x.Proc().status()
		if err != nil {
			return err
		}
		if epoch = st.Epoch; epoch == before.Epoch {
			return fmt.Errorf("node X is %s with epoch %d still", st.State, epoch)
		}
		return fc.Agreed()
	})
	cancel()
	require.NoError(t, err, "node X rejoins every ring with a new epoch after the resume; its log:\n%s", logTail(x.Proc(), resumed, 20))
	rejoined := time.Since(resumed)
	require.NoError(t, x.Proc().awaitHealthy(ctx), "node X's /healthz")

	// Nothing X did after the resume reached the database.
	rowsAfter := f.vmRows(t, ctx)
	tokAfter, _ := f.token(t, ctx, vm)
	assert.Equal(t, cloud.VMStopped, cloud.VMState(rowsAfter[vm].State), "VM %s stays stopped: X's stalled StartVm was not applied", vm)
	assert.Empty(t, diffRows(rowsPaused, rowsAfter), "no VM row changed after X resumed")
	assert.Equal(t, owner, tokAfter.Node, "VM %s's token names the new owner", vm)
	assert.Equal(t, ownerSt.Epoch, tokAfter.Epoch, "VM %s's token names the new owner's epoch", vm)
	assert.Equal(t, tokBefore.Token+1, tokAfter.Token,
		"the new owner's token is the next after the last committed one: X's claim (which would have made it one more) never committed")
	assert.Equal(t, tokTaken, tokAfter, "VM %s's token row did not change after X resumed", vm)

	// X's write was refused, with the typed error.
	xLog := logTail(x.Proc(), holding.At, 30)
	refused := x.Proc().logLines("write refused: this node no longer owns the resource", "resource="+vm)
	assert.Len(t, refused, 1, "node X logs the refusal of its stalled write; its log since the stall:\n%s", xLog)
	assert.Empty(t, slices.DeleteFunc(x.Proc().logLines("vm="+vm), func(l logLine) bool {
		return !strings.Contains(l.Text, `msg="vm start"`) && !strings.Contains(l.Text, `msg="vm stop"`)
	}), "node X reports no VM operation done on %s", vm)
	ops, err := collectOps(fc.OpLogs(), fc.Labels())
	require.NoError(t, err)
	var runs []string
	for _, e := range ops.Owner[op] {
		runs = append(runs, e.String())
		if e.Node == xid && e.Ran() {
			assert.Equal(t, string(message.ErrNotOwner.Code), e.Err, "node X's run of the StartVm ends not_owner: %s", e)
		}
	}

	t.Logf("eviction: %s evicted X %s after the pause (%s after its stall began)", evictedBy, ms(evicted.Sub(paused)), ms(evicted.Sub(holding.At)))
	t.Logf("takeover: the stalled StartVm ended %s after it was sent: %s", ms(first.took), stalledText)
	t.Logf("takeover: the new owner %s's first write of the VM: %s; the test's writes: %s", ownerProc.label, firstWrite, strings.Join(writes, ", "))
	t.Logf("token of VM %s: none before the pause; %d held by %s (epoch %d) after the takeover, unchanged after X resumed",
		vm[:8], tokAfter.Token, ownerProc.label, tokAfter.Epoch)
	t.Logf("rejoin: node X back in every ring with epoch %d (was %d) %s after SIGCONT", epoch, before.Epoch, ms(rejoined))
	t.Logf("the op logs' runs of the stalled StartVm: %s", strings.Join(runs, "; "))
	t.Logf("node X's log from the stall to its rejoin:\n%s", linesText(resumeLines(x.Proc(), holding.At)))
}

// resumeWords mark the log lines that tell what a paused node did when
// it resumed.
var resumeWords = []string{"test stall", "write refused", "vm operation failed", "evicted", "rejoin", "node serving", `msg="vm `}

// resumeLines returns the lines c logged since since that tell what it
// did when it resumed, up to its first "node serving".
func resumeLines(c *child, since time.Time) []logLine {
	var out []logLine
	for _, l := range c.logLines() {
		if l.At.Before(since) || !slices.ContainsFunc(resumeWords, func(w string) bool { return strings.Contains(l.Text, w) }) {
			continue
		}
		out = append(out, l)
		if strings.Contains(l.Text, `msg="node serving"`) {
			break
		}
	}
	return out
}

// operate calls msg (StartVm or StopVm) through api.portal and checks
// that owner ran it and left the VM in want; it returns how long it took.
func (f *fencingRun) operate(ctx context.Context, msg any, owner string, want cloud.VMState) (time.Duration, error) {
	start := time.Now()
	rep, err := service.Call[api.VmReply](ctx, f.cl, msg, bus.WithTimeout(fnBound))
	took := time.Since(start)
	switch {
	case err != nil:
		return took, err
	case rep.Node != owner:
		return took, fmt.Errorf("%T ran on %s, not on the new owner %s", msg, rep.Node, owner)
	case rep.VM.State != want:
		return took, fmt.Errorf("%T left the VM %s, want %s", msg, rep.VM.State, want)
	}
	return took, nil
}

// tookField is the took= attribute of a VM operation's log line.
var tookField = regexp.MustCompile(`took=(\S+)`)

// firstVMWrite describes the first VM operation c logged done on vm: its
// kind, its message and how long it took (the fence's wait included).
func firstVMWrite(c *child, vm string) string {
	for _, l := range c.logLines("vm=" + vm) {
		if !strings.Contains(l.Text, `msg="vm start"`) && !strings.Contains(l.Text, `msg="vm stop"`) {
			continue
		}
		kind, took := "stop", "?"
		if strings.Contains(l.Text, `msg="vm start"`) {
			kind = "start"
		}
		if m := tookField.FindStringSubmatch(l.Text); m != nil {
			took = m[1]
		}
		msg := ""
		if _, after, ok := strings.Cut(l.Text, " msg="); ok {
			if _, id, ok := strings.Cut(after, "msg="); ok {
				msg = " (message " + id[:min(8, len(id))] + ")"
			}
		}
		return fmt.Sprintf("%s%s at %s took %s", kind, msg, l.At.Format(clockFormat), took)
	}
	return "none logged"
}

// vmRow is a VM's row in PostgreSQL, every column.
type vmRow struct {
	Name, Image, Host, State string
	CPUs, MemoryMB           int64
}

// vmRows reads every VM row of the cluster.
func (f *fencingRun) vmRows(t *testing.T, ctx context.Context) map[string]vmRow {
	t.Helper()
	rows, err := f.fc.tables.db.QueryContext(ctx, `SELECT uuid, name, image_uuid, host_uuid, cpus, memory_mb, state FROM "`+f.fc.tables.base+`_refnode_vms"`)
	require.NoError(t, err, "read the VM rows")
	defer rows.Close()
	out := map[string]vmRow{}
	for rows.Next() {
		var id string
		var r vmRow
		require.NoError(t, rows.Scan(&id, &r.Name, &r.Image, &r.Host, &r.CPUs, &r.MemoryMB, &r.State))
		out[id] = r
	}
	require.NoError(t, rows.Err())
	return out
}

// diffRows lists the VMs whose rows differ between a and b.
func diffRows(a, b map[string]vmRow) []string {
	var out []string
	for id, ra := range a {
		if rb, ok := b[id]; !ok {
			out = append(out, fmt.Sprintf("%s: %+v, then gone", id, ra))
		} else if ra != rb {
			out = append(out, fmt.Sprintf("%s: %+v, then %+v", id, ra, rb))
		}
	}
	for id, rb := range b {
		if _, ok := a[id]; !ok {
			out = append(out, fmt.Sprintf("%s: new %+v", id, rb))
		}
	}
	slices.Sort(out)
	return out
}

// tokenRow is a resource's row in the fence's token table.
type tokenRow struct {
	Token, Epoch, Uses int64
	Node               string
}

// token reads resource's fence token row; ok is false if it has none.
func (f *fencingRun) token(t *testing.T, ctx context.Context, resource string) (tokenRow, bool) {
	t.Helper()
	var r tokenRow
	err := f.fc.tables.db.QueryRowContext(ctx, `SELECT token, node, epoch, uses FROM "`+f.fc.tables.base+`_refnode_fence_tokens" WHERE resource = $1`, resource).
		Scan(&r.Token, &r.Node, &r.Epoch, &r.Uses)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false
	}
	require.NoError(t, err, "read the fence token of %s", resource)
	return r, true
}

// duplicate is the second scenario: one CreateVm envelope delivered
// twice through api.portal, and once more from a killed node's queue.
func (f *fencingRun) duplicate(t *testing.T, ctx context.Context) {
	fc := f.fc
	tr, err := amqpbus.Dial(ctx, amqpbus.Config{URL: fc.broker, ConnectionName: "refnode fencing test"})
	require.NoError(t, err)
	defer tr.Close()
	replyQueue := fc.Prefix() + ".reply.fencing-test-" + randomHex(4)
	require.NoError(t, tr.DeclareQueue(ctx, replyQueue, driver.QueueOptions{Kind: driver.QueueTemporary}))
	rc := &replyCollector{}
	cons, err := tr.Consume(ctx, replyQueue, driver.ConsumeOptions{Prefetch: 16}, rc.add)
	require.NoError(t, err)
	defer cons.Cancel()

	// The envelope a service.Client would send: a request to api.portal
	// with a deadline in cluster time, under a fixed id.
	reg := message.NewRegistry()
	require.NoError(t, api.Register(reg))
	name := "fencing-dup-" + randomHex(4)
	typ, body, err := reg.Encode(api.CreateVm{Name: name, ImageUUID: f.image})
	require.NoError(t, err)
	op := "dup-" + randomHex(3)
	env := &wire.Envelope{ID: message.NewUUID(), Kind: wire.KindRequest, Type: typ, ServiceID: bus.APIPortal,
		ReplyTo: replyQueue, CorrelationID: message.NewUUID(), Source: "refnode-fencing-test",
		Timeout: fnEnvelopeTimeout, Headers: map[string]string{HeaderOp: op}, Body: body}
	if now, bound, ok := f.cl.ClusterTime(); ok {
		env.Deadline = now.Add(fnEnvelopeTimeout - bound).UnixNano()
	}
	data, err := wire.EncodeEnvelope(env, 0)
	require.NoError(t, err)

	start := time.Now()
	portal := fc.Prefix() + ".message." + bus.APIPortal
	for range 2 {
		require.NoError(t, tr.Publish(ctx, portal, data), "publish the CreateVm to %s", portal)
	}
	bctx, cancel := context.WithTimeout(ctx, fnBound)
	replies, err := rc.await(bctx, 2)
	cancel()
	require.NoError(t, err, "both deliveries through api.portal are answered")
	firstTwo := time.Since(start)
	created, err := decodeCreated(replies[0], env.CorrelationID)
	require.NoError(t, err, "the first reply")

	// The third delivery: into the vmInstance queue of the node that ran
	// the first, while it is paused; then it is killed, and a survivor
	// drains the queue and re-routes the message.
	slot := slices.IndexFunc(fc.Nodes(), func(n *faultNode) bool { return n.Running() && n.ID() == created.Node })
	require.GreaterOrEqual(t, slot, 0, "node %s, which ran the first CreateVm, runs", created.Node)
	k := fc.Node(slot)
	kid, klabel := k.ID(), k.Label()
	survivors := othersThan(fc.Running(), kid)
	sleepUntil(ctx, time.Now().Add(2*opLogFlush)) // its op log holds its run
	k.Pause(t)
	third := *env
	third.ServiceID = bus.ServiceID(api.VMService, kid)
	data3, err := wire.EncodeEnvelope(&third, 0)
	require.NoError(t, err)
	queue := fc.Prefix() + ".message." + third.ServiceID
	require.NoError(t, tr.Publish(ctx, queue, data3), "publish the CreateVm to %s", queue)
	k.Kill(t)
	killed := time.Now()
	bctx, cancel = context.WithTimeout(ctx, fnBound)
	replies, err = rc.await(bctx, 3)
	cancel()
	require.NoError(t, err, "the delivery from the killed node's queue is answered; the survivors' log:\n%s", linesText(drainLines(survivors, killed)))
	thirdAfter := time.Since(killed)

	for i, r := range replies {
		c, err := decodeCreated(r, env.CorrelationID)
		if assert.NoError(t, err, "reply %d", i+1) {
			assert.Equal(t, created, c, "reply %d equals the first", i+1)
		}
	}
	var ids []string
	for id, r := range f.vmRows(t, ctx) {
		if r.Name == name {
			ids = append(ids, id)
		}
	}
	assert.Equal(t, []string{created.VM.UUID}, ids, "exactly one VM named %s, the one the replies name", name)

	ev, by, ok := firstLogged(survivors, "evicted a node", kid)
	evText := "no survivor logged it"
	if ok {
		evText = fmt.Sprintf("%s evicted it %s after the kill", by.label, ms(ev.At.Sub(killed)))
	}
	t.Logf("duplicate: CreateVm %s (no VM UUID) published twice to api.portal: both answered within %s; VM %s on host %s, created by %s",
		env.ID[:8], ms(firstTwo), created.VM.UUID[:8], created.VM.HostUUID[:8], fc.Labels()[created.Node])
	t.Logf("duplicate: the third copy, put in paused %s's vmInstance queue, answered %s after %s was killed (%s)", klabel, ms(thirdAfter), klabel, evText)
	ops, err := collectOps(fc.OpLogs(), fc.Labels())
	require.NoError(t, err)
	var runs []string
	for _, e := range ops.Owner[op] {
		runs = append(runs, e.String())
	}
	t.Logf("duplicate: the vmInstance services' op logs for it: %s", strings.Join(runs, "; "))
}

// replyCollector keeps the bodies of the replies a consumer receives.
// Safe for concurrent use.
type replyCollector struct {
	mu     sync.Mutex
	bodies [][]byte
}

// add is the consumer's handler.
func (rc *replyCollector) add(d driver.Delivery) {
	rc.mu.Lock()
	rc.bodies = append(rc.bodies, slices.Clone(d.Body()))
	rc.mu.Unlock()
	_ = d.Ack()
}

// await waits until n replies arrived, and returns them all.
func (rc *replyCollector) await(ctx context.Context, n int) ([][]byte, error) {
	var out [][]byte
	err := poll(ctx, func() error {
		rc.mu.Lock()
		out = slices.Clone(rc.bodies)
		rc.mu.Unlock()
		if len(out) < n {
			return fmt.Errorf("%d replies of %d", len(out), n)
		}
		return nil
	})
	return out, err
}

// decodeCreated decodes a reply envelope to the CreateVm whose
// correlation id is corr.
func decodeCreated(data []byte, corr string) (api.VmCreated, error) {
	var c api.VmCreated
	env, err := wire.DecodeEnvelope(data, 0)
	switch {
	case err != nil:
		return c, err
	case env.Kind != wire.KindReply || env.CorrelationID != corr:
		return c, fmt.Errorf("not the reply: kind %s, correlation id %s", env.Kind, env.CorrelationID)
	case env.Error != nil:
		return c, fmt.Errorf("the reply is an error: %w", env.Error)
	case env.Type != "refnode.v1.VmCreated":
		return c, fmt.Errorf("the reply is a %s", env.Type)
	}
	if err := json.Unmarshal(env.Body, &c); err != nil {
		return c, fmt.Errorf("decode the reply %s: %w", env.Type, err)
	}
	return c, nil
}

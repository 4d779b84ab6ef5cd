package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	"github.com/cloudbus-go/cloudbus/service"
)

// The one-way test: one-way writes sent while their owner's database
// link is cut are kept until they run.
const (
	owWrites  = 200              // one-way SetImageName messages, each with a name of its own
	owImages  = 20               // images, all owned by node X, written in turn
	owRate    = 20               // messages per second
	owCutAt   = time.Second      // the cut starts this long after the first message
	owCut     = 6 * time.Second  // and lasts this long
	owTimeout = time.Minute      // each message's deadline
	owSettle  = 90 * time.Second // every message committed or dead-lettered by then
)

// TestOneWayWritesSurviveADatabaseCut runs three `refnode serve`
// processes on RabbitMQ and PostgreSQL, each behind its own proxies, and
// sends 200 one-way SetImageName messages (20 a second, each naming its
// own new name, deadline 1 min) about 20 images that node X owns: half
// through api.portal (service.Client.Send), half straight into X's image
// service queue (a bus of the test's own, routing as service.Send from a node
// does: to the owner on the ring without X while X's queue is gone).
// From 1 s after the first until 7 s, X's database link is cut: X fails
// its writes (internal), fences itself, is evicted and rejoins. A
// database trigger records every committed name change. Once the link
// healed, every message must be accounted for within 90 s: its name
// committed exactly once, or the message in the dead-letter queue with
// a reason; none lost, none applied twice.
func TestOneWayWritesSurviveADatabaseCut(t *testing.T) {
	ctx, broker := startProcessTest(t, processTest{Runs: "the one-way test runs processes for about 30 s", FullSpeed: true, Timeout: 4 * time.Minute})
	testStart := time.Now()
	fc := newFaultCluster(t, ctx, broker, faultOptions{Nodes: 3, Name: "oneway"})
	fc.Start(t, ctx)
	x := fc.Node(0)
	xid := x.ID()
	ids := idsOf(fc.Running())
	r := ringOver(t, ids)
	cl := fc.Client(t, ctx)
	images := make([]string, 0, owImages)
	for len(images) < owImages {
		id := message.NewUUID()
		if mustOwner(t, r, id) != xid {
			continue
		}
		_, err := service.Call[api.ImageReply](ctx, cl, api.AddImage{UUID: id, Name: "start"})
		require.NoError(t, err, "add an image")
		images = append(images, id)
	}
	audit := newChaosAudit(fc.tables.db, fc.tables.base)
	require.NoError(t, audit.install(ctx))
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		assert.NoError(t, audit.remove(cctx), "remove the audit trigger")
	})
	direct := directBus(t, ctx, broker, fc.Prefix())
	others := ringOver(t, ids[1:]) // the ring once X is evicted
	t.Logf("3 nodes serving %s after the test began: %s; node X is %s, owner of the %d images", since(testStart), fc.describe(), x.Label(), owImages)

	// Send: even messages through api.portal, odd ones into X's queue.
	type sent struct {
		name, id, path string
		err            error
	}
	out := make([]sent, owWrites)
	var cutOnce, healOnce sync.Once
	var cutAt, healedAt time.Time
	defer healOnce.Do(x.DB.Heal)
	first := time.Now()
	for i := range owWrites {
		at := first.Add(time.Duration(i) * time.Second / owRate)
		if now := time.Now(); at.After(now) {
			time.Sleep(at.Sub(now)) // pacing the load, not waiting for a state
		}
		if time.Since(first) >= owCutAt {
			cutOnce.Do(func() { x.DB.Cut(); cutAt = time.Now() })
		}
		if !cutAt.IsZero() && time.Since(cutAt) >= owCut {
			healOnce.Do(func() { x.DB.Heal(); healedAt = time.Now() })
		}
		s := sent{name: fmt.Sprintf("ow-%03d", i), id: message.NewUUID()}
		msg := api.SetImageName{UUID: images[i%owImages], Name: s.name}
		if i%2 == 0 {
			s.path = "api.portal"
			s.err = service.Send(ctx, cl, msg, bus.WithID(s.id), bus.WithTimeout(owTimeout))
		} else {
			s.path = "X's queue"
			s.err = sendRouted(ctx, direct, msg, s.id, []string{xid, mustOwner(t, others, msg.UUID)})
		}
		out[i] = s
	}
	sentFor := time.Since(first)
	if cutAt.IsZero() {
		cutOnce.Do(func() { x.DB.Cut(); cutAt = time.Now() })
	}
	if wait := owCut - time.Since(cutAt); wait > 0 {
		time.Sleep(wait) // the cut lasts its length
	}
	healOnce.Do(func() { x.DB.Heal(); healedAt = time.Now() })
	for _, s := range out {
		require.NoError(t, s.err, "the broker took message %s (%s)", s.name, s.path)
	}

	// Account for every message: committed (the audit) or dead-lettered.
	dead := newDeadLetters(t, ctx, broker, fc.Prefix())
	var commits map[string]int
	var accounted time.Time
	actx, acancel := context.WithTimeout(ctx, owSettle)
	err := poll(actx, func() error {
		rows, err := audit.rows(actx)
		if err != nil {
			return err
		}
		commits = map[string]int{}
		for _, r := range rows {
			commits[r.New]++
		}
		var missing []string
		for _, s := range out {
			if commits[s.name] == 0 && dead.reason(s.id) == "" {
				missing = append(missing, fmt.Sprintf("%s %s (%s)", s.name, s.id, s.path))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d of %d messages neither committed nor dead-lettered: %s", len(missing), owWrites, strings.Join(missing, ", "))
		}
		accounted = time.Now()
		return nil
	})
	acancel()
	lost, twice, deadN := 0, 0, 0
	byPath := map[string][3]int{} // committed, dead-lettered, lost
	for _, s := range out {
		c := byPath[s.path]
		switch {
		case commits[s.name] > 1:
			twice++
			t.Errorf("message %s (%s, %s) was applied %d times", s.id, s.name, s.path, commits[s.name])
		case commits[s.name] == 1:
			c[0]++
		case dead.reason(s.id) != "":
			deadN++
			c[1]++
		default:
			lost++
			c[2]++
			t.Errorf("message %s (%s, %s) is lost; the op logs say:\n%s", s.id, s.name, s.path, opLinesOf(fc.OpLogs(), s.id))
		}
		byPath[s.path] = c
	}
	require.NoError(t, err, "every one-way message the broker took runs once or waits in the dead-letter queue; X's log:\n%s",
		logTail(x.Proc(), cutAt, 40))
	assert.Zero(t, lost, "lost")
	assert.Zero(t, twice, "applied twice")
	for _, id := range dead.ids() {
		assert.NotEmpty(t, dead.reason(id), "a dead letter says why")
	}

	var retried, deadLettered uint64
	for _, c := range fc.Running() {
		if st, err := c.status(); err == nil {
			retried += st.Bus.Retried
			deadLettered += st.Bus.DeadLettered
		}
	}
	evictions := 0
	for _, c := range fc.Running() {
		if c.id != xid {
			evictions += len(c.logLines("heartbeat: evicted a node", xid))
		}
	}
	t.Logf("sent %d one-way writes in %s (%d/s) about %d images that %s owns; X's database link cut %s after the first, healed %s later",
		owWrites, ms(sentFor), owRate, owImages, x.Label(), ms(cutAt.Sub(first)), ms(healedAt.Sub(cutAt)))
	t.Logf("| path | sent | committed once | dead-lettered | lost |")
	t.Logf("| --- | --- | --- | --- | --- |")
	for _, p := range []string{"api.portal", "X's queue"} {
		c := byPath[p]
		t.Logf("| %s | %d | %d | %d | %d |", p, owWrites/2, c[0], c[1], c[2])
	}
	t.Logf("applied twice %d; every message accounted for %s after the heal; the nodes gave messages back %d times for another attempt and dead-lettered %d (counters of the running processes); X evicted %d times",
		twice, ms(accounted.Sub(healedAt)), retried, deadLettered, evictions)
	for _, id := range dead.ids() {
		t.Logf("dead letter %s: %s", id, dead.reason(id))
	}
	t.Logf("the one-way test took %s", since(testStart))
}

// opLinesOf returns the op-log lines that name id, for a report.
func opLinesOf(files []string, id string) string {
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, id) {
				b.WriteString(filepath.Base(f) + ": " + l + "\n")
			}
		}
	}
	return b.String()
}

// sendRouted sends msg one-way into the image service queue of owners[0]
// as service.Send from a node does: while that queue is gone (its node was
// evicted, its queues drained and deleted) the send is refused (no_route,
// nothing sent) and goes to the owner of the ring without it, owners[1],
// and so on in turn, a few times, every attempt with the same id.
func sendRouted(ctx context.Context, b *bus.CloudBus, msg api.SetImageName, id string, owners []string) error {
	var err error
	for attempt := range 20 {
		err = b.Send(ctx, bus.ServiceID(api.ImageService, owners[attempt%len(owners)]), msg, bus.WithID(id), bus.WithTimeout(owTimeout))
		if err == nil || message.CodeOf(err).Retry() != message.RetrySafe {
			return err
		}
		select {
		case <-time.After(20 * time.Millisecond): // a re-route's pause
		case <-ctx.Done():
			return err
		}
	}
	return err
}

// directBus opens a bus of the test's own on the cluster's prefix, to
// send into a node's queue as service.Send from a node does; closed at cleanup.
func directBus(t *testing.T, ctx context.Context, broker, prefix string) *bus.CloudBus {
	t.Helper()
	tr, err := amqpbus.Dial(ctx, amqpbus.Config{URL: broker, ConnectionName: "refnode one-way test"})
	require.NoError(t, err)
	reg := message.NewRegistry()
	require.NoError(t, api.Register(reg))
	b, err := bus.Open(ctx, bus.Config{Transport: tr, Prefix: prefix, Registry: reg, ClientOnly: true, Clock: bus.LocalClock()})
	if err != nil {
		_ = tr.Close()
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = b.Close()
		_ = tr.Close()
	})
	return b
}

// deadLetters reads a cluster's dead-letter queue as messages arrive.
type deadLetters struct {
	mu      sync.Mutex
	reasons map[string]string // message id -> reason
}

// newDeadLetters consumes <prefix>.dead until the test ends; the
// messages stay acknowledged (the cluster's cleanup deletes the queue).
func newDeadLetters(t *testing.T, ctx context.Context, broker, prefix string) *deadLetters {
	t.Helper()
	tr, err := amqpbus.Dial(ctx, amqpbus.Config{URL: broker, ConnectionName: "refnode dead-letter reader"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	dl := &deadLetters{reasons: map[string]string{}}
	_, err = tr.Consume(ctx, prefix+".dead", driver.ConsumeOptions{Prefetch: 64}, func(d driver.Delivery) {
		env, err := wire.DecodeEnvelope(d.Body(), message.DefaultMaxSize)
		id := "undecodable"
		if err == nil {
			id = env.ID
		}
		reason := d.Header(driver.HeaderDeadReason)
		if reason == "" {
			reason = "(no reason)"
		}
		dl.mu.Lock()
		dl.reasons[id] = strings.TrimSpace(reason)
		dl.mu.Unlock()
		_ = d.Ack()
	})
	require.NoError(t, err, "consume the dead-letter queue")
	return dl
}

func (dl *deadLetters) reason(id string) string {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.reasons[id]
}

func (dl *deadLetters) ids() []string {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	out := make([]string, 0, len(dl.reasons))
	for id := range dl.reasons {
		out = append(out, id)
	}
	return out
}

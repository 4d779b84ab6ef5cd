package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/internal/wire"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestZombieStepsAside: a node cut off from the bus while its database
// works keeps beating, reporting its bus down; a peer evicts it after
// the lease, so calls about its resources end with node_left and then
// succeed on the survivors, well within their deadline; once its bus
// heals it rejoins with a new epoch.
func TestZombieStepsAside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hb := heartbeat.TestConfig()
		j := newJournal()
		c, _ := startCluster(t, 3, j, servicetest.Options{})
		zombie, caller := c.Node(0), c.Node(1)
		var res string
		for res == "" || c.Owner(res) != zombie.UUID() {
			res = message.NewUUID()
		}
		epoch := zombie.Epoch()
		cut := time.Now()
		c.Partition(zombie.UUID(), true)
		_, err := service.Call[any](t.Context(), caller, Touch{Resource: res}, bus.WithTimeout(5*time.Second))
		if err != nil { // or the reply of the survivor the message was drained to, if it came before the node-left event
			require.ErrorIs(t, err, message.ErrNodeLeft, "the caller learns the owner is gone, not a timeout")
		}
		failedAfter := time.Since(cut)
		got, err := service.Call[Touched](t.Context(), caller, Touch{Resource: res}, bus.WithTimeout(5*time.Second))
		require.NoError(t, err, "the survivors own the zombie's resources")
		answeredAfter := time.Since(cut)
		assert.NotEqual(t, zombie.UUID(), got.Node)
		t.Logf("zombie (bus cut, database fine): caller told node_left after %v, its resource answered by a survivor after %v (lease %v, eviction threshold %v)",
			failedAfter, answeredAfter, hb.Lease, hb.EvictAfter)
		assert.LessOrEqual(t, answeredAfter, hb.EvictAfter+time.Second, "within the eviction threshold + 1 s")

		c.Partition(zombie.UUID(), false)
		c.WaitFor(t, 2*time.Second, "the zombie rejoins with a new epoch once its bus heals", func() bool {
			return zombie.State() == service.StateServing && zombie.Epoch() != epoch
		})
		c.WaitConverged(t, time.Second)
	})
}

// TestBusOutageEvictsNobody: every node loses the bus for ten eviction
// thresholds and gets it back, one after the other: nobody is evicted,
// nobody rejoins.
func TestBusOutageEvictsNobody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hb := heartbeat.TestConfig()
		c, _ := startCluster(t, 3, newJournal(), servicetest.Options{})
		epochs := map[string]int64{}
		for _, n := range c.Live() {
			epochs[n.UUID()] = n.Epoch()
			c.Network().Partition(n.UUID(), true)
		}
		time.Sleep(10 * hb.EvictAfter)
		for id := range epochs {
			c.Network().Partition(id, false)
			time.Sleep(hb.EvictAfter / 2) // reconnects spread over time
		}
		time.Sleep(3 * hb.EvictAfter)
		for i := range 3 {
			n := c.Node(i)
			assert.Equal(t, service.StateServing, n.State())
			assert.Equal(t, epochs[n.UUID()], n.Epoch(), "node %d was neither evicted nor rejoined", i)
			assert.Len(t, n.Members(), 3)
		}
	})
}

// TestDeadNodesQueuesAreDrained: one-way messages queued for a node
// that died are moved to the new owners once it is evicted: each is
// handled, none lost, and the dead node's queues are deleted.
func TestDeadNodesQueuesAreDrained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newJournal()
		c, _ := startCluster(t, 3, j, servicetest.Options{Logger: failLogger(t)})
		dead := c.Node(2)
		queue := busx.Of(dead.Bus()).QueueName(bus.ServiceID("recorder", dead.UUID()))
		c.Kill(dead.UUID())
		sender := c.Node(0).Bus()
		const n = 50
		var sent []string
		for range n {
			res := message.NewUUID()
			sent = append(sent, res)
			require.NoError(t, sender.Send(t.Context(), bus.ServiceID("recorder", dead.UUID()), Touch{Resource: res}))
		}
		c.WaitGone(t, dead.UUID(), time.Second)
		c.WaitFor(t, 2*time.Second, "every queued message is handled by the new owners", func() bool { return len(j.all()) == n })
		handled := map[string]string{}
		for _, h := range j.all() {
			handled[h.resource] = h.node
		}
		for _, res := range sent {
			require.Contains(t, handled, res)
			assert.Equal(t, c.Owner(res), handled[res], "handled by the resource's new owner")
		}
		// Deleted once absent for three EvictAfter (300 ms here), at a
		// sweep (every EvictAfter).
		c.WaitFor(t, 2*time.Second, "the dead node's queue is deleted", func() bool {
			_, ok := c.Network().Queue(queue)
			return !ok
		})
		var moved int
		for _, n := range c.Live() {
			moved += n.DrainStats().Moved
		}
		assert.GreaterOrEqual(t, moved, n, "every message was moved (some twice, if they reached a node whose ring had not dropped the dead node yet)")
	})
}

// TestRestartedClusterDrainsTheDead: every node dies with messages
// queued for it; new nodes started on the same store find the dead
// nodes' queues recorded there and drain them.
func TestRestartedClusterDrainsTheDead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newJournal()
		c, _ := startCluster(t, 3, j, servicetest.Options{Logger: failLogger(t)})
		client := c.Client(t)
		var queues []string
		var dead []string
		for i := range 3 {
			n := c.Node(i)
			dead = append(dead, n.UUID())
			queues = append(queues, busx.Of(n.Bus()).QueueName(bus.ServiceID("recorder", n.UUID())))
		}
		var sent int
		for _, id := range dead {
			c.Kill(id)
		}
		for _, id := range dead {
			for range 10 {
				require.NoError(t, client.Bus().Send(t.Context(), bus.ServiceID("recorder", id), Touch{Resource: message.NewUUID()},
					bus.WithTimeout(time.Minute)))
				sent++
			}
		}
		for range 3 {
			c.AddNode(t)
		}
		handled := func() map[string]int {
			m := map[string]int{}
			for _, h := range j.all() {
				m[h.resource]++
			}
			return m
		}
		wctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if err := c.Await(wctx, "every message handled", func() bool { return len(handled()) == sent }); err != nil {
			var st []service.DrainStats
			for _, n := range c.Live() {
				st = append(st, n.DrainStats())
			}
			var stats []bus.Stats
			for _, n := range c.Live() {
				stats = append(stats, n.Bus().Stats())
			}
			t.Fatalf("%d of %d messages handled, %d handlings; drains %+v; bus stats %+v; queues %+v", len(handled()), sent, len(j.all()), st, stats, c.Network().Queues())
		}
		// Deleted once absent for three EvictAfter (300 ms here), at a
		// sweep (every EvictAfter).
		c.WaitFor(t, 2*time.Second, "the dead nodes' queues are deleted", func() bool {
			for _, q := range queues {
				if _, ok := c.Network().Queue(q); ok {
					return false
				}
			}
			return true
		})
	})
}

// TestLeaveWithADeadPeer: a node leaving while a peer is dead but not
// yet evicted does not wait for the dead peer, whether the store already
// shows its record stale or it died a moment ago: it drains and deletes
// its queues in well under the leave timeout.
func TestLeaveWithADeadPeer(t *testing.T) {
	hb := heartbeat.TestConfig()
	for name, after := range map[string]time.Duration{"record stale": hb.Lease, "record still fresh": 0} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				j := newJournal()
				c, _ := startCluster(t, 3, j, servicetest.Options{})
				leaver, deadPeer := c.Node(0), c.Node(1)
				queue := busx.Of(leaver.Bus()).QueueName(bus.ServiceID("recorder", leaver.UUID()))
				client := c.Client(t)
				c.Kill(deadPeer.UUID())
				time.Sleep(after)
				var wg sync.WaitGroup
				for range 20 { // messages in flight to the leaver
					wg.Go(func() {
						_, _ = service.Call[any](context.WithoutCancel(t.Context()), c.Node(2), Touch{Resource: message.NewUUID()}, bus.WithTimeout(2*time.Second))
					})
				}
				for range 10 { // API calls about the dead peer's resources: some portal handlers of the leaver wait on it
					var res string
					for res == "" || c.Owner(res) != deadPeer.UUID() {
						res = message.NewUUID()
					}
					wg.Go(func() {
						_, _ = service.Call[Touched](context.WithoutCancel(t.Context()), client, APITouch{Resource: res}, bus.WithTimeout(2*time.Second))
					})
				}
				time.Sleep(time.Millisecond)
				start := time.Now()
				require.NoError(t, c.Stop(leaver.UUID()))
				took := time.Since(start)
				t.Logf("a leave with a dead peer (%s) took %v (interval %v)", name, took, hb.Interval)
				assert.Less(t, took, hb.EvictAfter, "well before anyone could evict the leaving node")
				_, ok := c.Network().Queue(queue)
				assert.False(t, ok, "the leaver drained and deleted its queue")
				wg.Wait()
			})
		})
	}
}

// TestNoMessageBeforeTheClusterTime: a request waits in a node's queue
// before the node starts, as one waits in the queue of a node that
// rejoins after its eviction (from its earlier life). Its deadline in
// cluster time passed long ago, but its relative timeout still looks
// fresh. The node measures the cluster time before it takes any message,
// so it refuses the request as late: no handler runs and no reply goes
// out (not even not_owner from a node still starting).
func TestNoMessageBeforeTheClusterTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		net := membus.New()
		store := memstore.New(memstore.Config{})
		const prefix = "clocktest"
		id, res := message.NewUUID(), message.NewUUID()

		feeder := net.Transport("feeder")
		defer feeder.Close()
		queue := prefix + ".message." + bus.ServiceID("recorder", id)
		replyTo := prefix + ".reply.feeder"
		require.NoError(t, feeder.DeclareQueue(ctx, queue, driver.QueueOptions{Kind: driver.QueueDurable}))
		require.NoError(t, feeder.DeclareQueue(ctx, replyTo, driver.QueueOptions{Kind: driver.QueueTemporary}))
		replies := make(chan string, 4)
		cons, err := feeder.Consume(ctx, replyTo, driver.ConsumeOptions{}, func(d driver.Delivery) {
			replies <- string(d.Body())
			_ = d.Ack()
		})
		require.NoError(t, err)
		defer cons.Cancel()
		body, err := json.Marshal(Touch{Resource: res, Seq: 1})
		require.NoError(t, err)
		data, err := wire.EncodeEnvelope(&wire.Envelope{ID: message.NewUUID(), Kind: wire.KindRequest, Type: "svctest.v1.Touch",
			ServiceID: bus.ServiceID("recorder", id), ResourceUUID: res, CorrelationID: message.NewUUID(), ReplyTo: replyTo,
			Timeout: time.Hour, Deadline: time.Now().Add(-time.Minute).UnixNano(), Body: body}, 0)
		require.NoError(t, err)
		require.NoError(t, feeder.Publish(ctx, queue, data))

		j := newJournal()
		store.SetLatency(id, 20*time.Millisecond) // each round trip to the store, the clock's included
		n, err := service.NewNode(service.Config{Node: id, Prefix: prefix, Transport: net.Transport(id), Store: store.For(id),
			Registry: registry(), Services: []service.Service{newRecorder(j)}, Heartbeat: heartbeat.TestConfig(), NoRejoin: true})
		require.NoError(t, err)
		require.NoError(t, n.Start(ctx))
		defer n.Close()
		start := time.Now()
		for n.Bus().Stats().Late == 0 {
			time.Sleep(10 * time.Millisecond) // virtual time
			if time.Since(start) > time.Minute {
				t.Fatalf("the waiting request was not refused as late within a minute: %+v", n.Bus().Stats())
			}
		}
		synctest.Wait()
		assert.EqualValues(t, 1, n.Bus().Stats().Late)
		assert.Empty(t, j.all(), "no handler ran it")
		select {
		case r := <-replies:
			t.Errorf("a request whose caller gave up long ago was answered: %s", r)
		default:
		}
	})
}

// recordCheckingTransport checks, at each declaration of one of node's
// durable queues, that the store already records it.
type recordCheckingTransport struct {
	driver.Transport
	node  string
	store heartbeat.Store

	mu         sync.Mutex
	checked    int
	unrecorded []string
}

func (r *recordCheckingTransport) DeclareQueue(ctx context.Context, name string, opts driver.QueueOptions) error {
	if opts.Kind == driver.QueueDurable && strings.HasSuffix(name, "."+r.node) {
		all, err := r.store.Queues(ctx)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.checked++
		if !slices.Contains(all[r.node], name) {
			r.unrecorded = append(r.unrecorded, name)
		}
		r.mu.Unlock()
	}
	return r.Transport.DeclareQueue(ctx, name, opts)
}

// TestQueuesRecordedBeforeDeclared: a node records each of its queues in
// the store before it declares it, so a start that fails or is killed
// half-way leaves no queue the survivors cannot find and delete.
func TestQueuesRecordedBeforeDeclared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := membus.New()
		store := memstore.New(memstore.Config{})
		id := message.NewUUID()
		tr := &recordCheckingTransport{Transport: net.Transport(id), node: id, store: store.For(id)}
		n, err := service.NewNode(service.Config{Node: id, Prefix: "recorded", Transport: tr, OwnTransport: true, Store: store.For(id),
			Registry: registry(), Services: []service.Service{newRecorder(newJournal())}, Heartbeat: heartbeat.TestConfig(), NoRejoin: true})
		require.NoError(t, err)
		require.NoError(t, n.Start(t.Context()))
		defer n.Close()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		assert.Equal(t, 2, tr.checked, "the membership's and the recorder's queues")
		assert.Empty(t, tr.unrecorded, "declared before the store recorded them")
	})
}

// brokenQueueTransport fails every Consume of one queue, as RabbitMQ 3.10
// fails a basic.consume on a quorum queue whose replicas are gone.
type brokenQueueTransport struct {
	driver.Transport
	broken string
}

func (b *brokenQueueTransport) Consume(ctx context.Context, queue string, opts driver.ConsumeOptions, handle func(driver.Delivery)) (driver.Consumer, error) {
	if queue == b.broken {
		return nil, fmt.Errorf("consume %s: the broker failed the connection (INTERNAL_ERROR): %w", queue, message.ErrUnavailable)
	}
	return b.Transport.Consume(ctx, queue, opts, handle)
}

// TestUnconsumableQueueOfALeftNodeDeleted: a queue of a node that left
// that no drain can consume is deleted, if it is idle, once its node has
// been absent for the grace and stuckDrains drains in a row failed; its
// record goes with it.
func TestUnconsumableQueueOfALeftNodeDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		net := membus.New()
		store := memstore.New(memstore.Config{})
		const prefix = "stuck"
		id, gone := message.NewUUID(), message.NewUUID()
		queue := prefix + ".message." + bus.ServiceID("recorder", gone)
		feeder := net.Transport("feeder")
		defer feeder.Close()
		require.NoError(t, feeder.DeclareQueue(ctx, queue, driver.QueueOptions{Kind: driver.QueueDurable}))
		require.NoError(t, store.For(gone).AddQueues(ctx, gone, []string{queue}))

		tr := &brokenQueueTransport{Transport: net.Transport(id), broken: queue}
		n, err := service.NewNode(service.Config{Node: id, Prefix: prefix, Transport: tr, OwnTransport: true, Store: store.For(id),
			Registry: registry(), Services: []service.Service{newRecorder(newJournal())}, Heartbeat: heartbeat.TestConfig(), NoRejoin: true})
		require.NoError(t, err)
		require.NoError(t, n.Start(ctx))
		defer n.Close()
		start := time.Now()
		for {
			if _, ok := net.Queue(queue); !ok {
				break
			}
			time.Sleep(10 * time.Millisecond) // virtual time
			require.Less(t, time.Since(start), time.Minute, "the unconsumable queue is still there")
		}
		took := time.Since(start)
		hb := heartbeat.TestConfig()
		assert.GreaterOrEqual(t, took, 3*hb.EvictAfter, "not before the grace")
		assert.Less(t, took, 3*hb.EvictAfter+7*hb.EvictAfter, "at most a few sweeps after the grace and the failed drains")
		synctest.Wait()
		all, err := store.For(id).Queues(ctx)
		require.NoError(t, err)
		assert.Empty(t, all[gone], "its record is gone too")
	})
}

// TestStartingNodeNotDrained: the queues of a node that recorded them
// but has not joined yet (it is starting: it records its queues before
// it declares them and joins) are not drained beside it by the owner of
// its UUID; absent for half an EvictAfter more, it is drained as a node
// that died before it joined.
func TestStartingNodeNotDrained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hb := heartbeat.TestConfig()
		j := newJournal()
		c, _ := startCluster(t, 2, j, servicetest.Options{Logger: failLogger(t)})
		starting := message.NewUUID()
		svc := bus.ServiceID("recorder", starting)
		queue := busx.Of(c.Node(0).Bus()).QueueName(svc)
		require.NoError(t, c.Store().AddQueues(t.Context(), starting, []string{queue}))
		tr := c.Network().Transport(starting)
		defer tr.Close()
		require.NoError(t, tr.DeclareQueue(t.Context(), queue, driver.QueueOptions{Kind: driver.QueueDurable}))
		require.NoError(t, c.Node(0).Bus().Send(t.Context(), svc, Touch{Resource: message.NewUUID()}, bus.WithTimeout(time.Minute)))
		for _, n := range c.Live() {
			n.KickSweep()
		}
		synctest.Wait()
		q, ok := c.Network().Queue(queue)
		require.True(t, ok)
		assert.Equal(t, 1, q.Ready, "the starting node's message waits in its queue")
		assert.Zero(t, q.Consumers, "nobody drains the queue of a node that is starting")
		assert.Empty(t, j.all())
		c.WaitFor(t, 3*hb.EvictAfter, "a node that never joined is drained in the end", func() bool { return len(j.all()) == 1 })
	})
}

package service_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/ring/ringtest"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startCluster starts n nodes, each with a recorder sharing j.
func startCluster(t *testing.T, n int, j *journal, opts servicetest.Options) (*servicetest.Cluster, []*recorder) {
	t.Helper()
	var mu sync.Mutex
	var recs []*recorder
	opts.Nodes = n
	opts.Registry = registry()
	opts.Services = func(i int, _ nodekit.Env) []service.Service {
		r := newRecorder(j)
		mu.Lock()
		recs = append(recs, r)
		mu.Unlock()
		return []service.Service{r}
	}
	c := servicetest.Start(t, opts)
	return c, recs
}

func uuids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = message.NewUUID()
	}
	return out
}

// TestRoutingAndTakeoverInVirtualTime is the heart of the design: 1,000
// resource messages each handled by the owner Locate names; a node stops
// beating without a goodbye; within the eviction threshold plus one check
// interval every ring copy agrees without it, a call pending towards it
// fails with node-left before its own timeout, and every message sent
// afterwards is handled by the survivors. It runs on each ring.
func TestRoutingAndTakeoverInVirtualTime(t *testing.T) {
	for _, r := range ringtest.Kinds() {
		t.Run(r.Name, func(t *testing.T) { routingAndTakeover(t, r.New) })
	}
}

// ringOf returns a new empty ring from newRing, or the default if nil.
func ringOf(t *testing.T, newRing func() ring.Ring) ring.Ring {
	if newRing != nil {
		return newRing()
	}
	r, err := ring.New(ring.DefaultConfig())
	require.NoError(t, err)
	return r
}

func routingAndTakeover(t *testing.T, newRing func() ring.Ring) {
	synctest.Test(t, func(t *testing.T) {
		hb := heartbeat.TestConfig()
		j := newJournal()
		c, _ := startCluster(t, 3, j, servicetest.Options{Heartbeat: hb, NoRejoin: true, NewRing: newRing})
		ctx := t.Context()
		resources := uuids(1000)

		sendAll := func(round int) {
			t.Helper()
			live := c.Live()
			for i, res := range resources {
				sender := live[i%len(live)]
				got, err := service.Call[Touched](ctx, sender, Touch{Resource: res, Seq: round})
				require.NoError(t, err, "message %d of round %d", i, round)
				want, err := sender.Owner(res)
				require.NoError(t, err)
				require.Equal(t, want, got.Node, "resource %s must be handled by its ring owner", res)
			}
		}
		sendAll(1)
		owners := map[string]int{}
		for _, h := range j.all() {
			owners[h.node]++
			require.Equal(t, c.Owner(h.resource), h.node)
		}
		require.Len(t, owners, 3, "every node owns some of 1,000 resources: %v", owners)
		// The owners are those of the ring the nodes were given: a fresh
		// copy of it with the same members names the same owner for each.
		want := ringOf(t, newRing)
		require.NoError(t, ring.Sync(want, c.Node(0).Members()))
		for _, res := range resources {
			owner, err := want.Locate(res)
			require.NoError(t, err)
			require.Equal(t, owner, c.Owner(res), "resource %s: its owner on the configured ring", res)
		}

		// A call pending towards the victim: it blocks in the handler.
		victim := c.Node(1)
		var blocked string
		for _, res := range resources {
			if c.Owner(res) == victim.UUID() {
				blocked = res
				break
			}
		}
		const callTimeout = 30 * time.Second
		pending := make(chan error, 1)
		callStart := time.Now()
		go func() {
			_, err := service.Call[any](ctx, c.Node(0), Touch{Resource: blocked, Block: true}, bus.WithTimeout(callTimeout))
			pending <- err
		}()
		c.WaitFor(t, time.Second, "the blocking call reached the victim", func() bool {
			return c.Node(0).Bus().Stats().Pending == 1
		})

		stopped := time.Now()
		c.StopHeartbeat(victim.UUID())
		bound := hb.EvictAfter + hb.Interval
		c.WaitFor(t, 2*bound, "every survivor's ring drops the victim", func() bool {
			for _, n := range []*service.Node{c.Node(0), c.Node(2)} {
				for _, m := range n.Members() {
					if m == victim.UUID() {
						return false
					}
				}
			}
			return true
		})
		took := time.Since(stopped)
		t.Logf("ring copies agree without the victim %s after it stopped beating (bound: threshold %s + check interval %s)", took, hb.EvictAfter, hb.Interval)
		assert.LessOrEqual(t, took, bound, "eviction must complete within threshold + one check interval")
		assert.Equal(t, c.Node(0).Fingerprint(), c.Node(2).Fingerprint())

		err := <-pending
		assert.ErrorIs(t, err, message.ErrNodeLeft, "the pending call fails with node-left")
		assert.Less(t, time.Since(callStart), callTimeout, "…before its own timeout")
		t.Logf("pending call failed with node-left after %s (its timeout: %s)", time.Since(callStart), callTimeout)

		// The victim learns it was evicted once it reaches the store again.
		c.ResumeHeartbeat(victim.UUID())
		select {
		case <-victim.Done():
		case <-time.After(10 * hb.Interval):
			t.Fatal("the evicted node did not stop")
		}
		assert.Equal(t, service.StateStopped, victim.State())

		// Every resource is now handled by a survivor, and nothing fails.
		before := len(j.all())
		sendAll(2)
		for _, h := range j.all()[before:] {
			require.NotEqual(t, victim.UUID(), h.node)
		}
	})
}

// TestPerResourceSerialExecution: messages for one resource never overlap
// and keep their order, while different resources run concurrently.
func TestPerResourceSerialExecution(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newJournal()
		c, _ := startCluster(t, 3, j, servicetest.Options{})
		ctx := t.Context()
		resources := uuids(100)
		const each = 10
		sender := c.Node(0)
		var wg sync.WaitGroup
		for _, res := range resources {
			for k := range each {
				require.NoError(t, service.Send(ctx, sender, Touch{Resource: res, Seq: k}))
			}
		}
		c.WaitFor(t, 10*time.Second, "all messages handled", func() bool { return len(j.all()) == len(resources)*each })
		wg.Wait()
		j.mu.Lock()
		defer j.mu.Unlock()
		assert.False(t, j.overlap, "two handlers of one resource overlapped")
		seqs := map[string][]int{}
		for _, h := range j.entries {
			seqs[h.resource] = append(seqs[h.resource], h.seq)
		}
		for _, res := range resources {
			assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, seqs[res], "order of resource %s", res)
		}
		t.Logf("at most %d handlers ran at once across the cluster", j.maxRun)
		assert.Greater(t, j.maxRun, 1, "different resources must run concurrently")
	})
}

// TestAPIPortalFromClient: an API message sent to api.portal by a client
// that is not a node reaches the owner, and the reply reaches the client,
// whichever node's portal takes it.
func TestAPIPortalFromClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newJournal()
		c, _ := startCluster(t, 3, j, servicetest.Options{})
		client := c.Client(t)
		ctx := t.Context()
		for _, res := range uuids(60) {
			got, err := service.Call[Touched](ctx, client, APITouch{Resource: res})
			require.NoError(t, err)
			assert.Equal(t, c.Owner(res), got.Node, "the reply names the owner")
		}
		portals := map[string]int{}
		for _, h := range j.all() {
			assert.Equal(t, c.Owner(h.resource), h.node)
			portals[h.portal]++
		}
		for _, n := range c.Live() {
			assert.Positive(t, portals[n.UUID()], "the portal of every node forwards API messages: %v", portals)
		}
		// The client joined neither the membership nor any ring.
		recs, err := c.Store().List(ctx)
		require.NoError(t, err)
		assert.Len(t, recs, 3)
		for _, n := range c.Live() {
			assert.Len(t, n.Members(), 3)
		}
		// An API message no service accepts is refused with a code.
		_, err = service.Call[any](ctx, client, Touch{Resource: message.NewUUID()})
		assert.ErrorIs(t, err, message.ErrUnknownMessage)
	})
}

// TestBusyWhenResourceLineFull: a full per-resource queue answers busy and
// the node stays healthy.
func TestBusyWhenResourceLineFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newJournal()
		j.hold = make(chan struct{})
		c, _ := startCluster(t, 2, j, servicetest.Options{Limits: bus.Limits{MaxQueuePerResource: 4}})
		ctx := t.Context()
		res := message.NewUUID()
		sender := c.Node(0)
		results := make(chan error, 10)
		for k := range 5 { // one runs, four wait
			go func() {
				_, err := service.Call[any](ctx, sender, Touch{Resource: res, Seq: k})
				results <- err
			}()
			synctest.Wait()
		}
		_, err := service.Call[any](ctx, sender, Touch{Resource: res, Seq: 99})
		assert.ErrorIs(t, err, message.ErrBusy)
		assert.Equal(t, message.RetrySafe, message.CodeOf(err).Retry())

		close(j.hold)
		for range 5 {
			require.NoError(t, <-results)
		}
		_, err = service.Call[any](ctx, sender, Touch{Resource: res, Seq: 100})
		require.NoError(t, err, "the node stays healthy")
		for _, n := range c.Live() {
			assert.Equal(t, service.StateServing, n.State())
		}
	})
}

// TestOrderlyLeave: a node that leaves is dropped by every ring before its
// queues are deleted, and calls made during the leave all succeed.
func TestOrderlyLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newJournal()
		var mu sync.Mutex
		var violations []string
		c, recs := startCluster(t, 3, j, servicetest.Options{Logger: failLogger(t)})
		net := c.Network()
		for _, r := range recs {
			r.setOnRing(func(n *service.Node, ch service.RingChange) {
				for _, id := range ch.Joined {
					if _, ok := net.Queue("test.message.recorder." + id); !ok {
						mu.Lock()
						violations = append(violations, "ring of "+n.UUID()+" added "+id+" before its queue existed")
						mu.Unlock()
					}
				}
			})
		}
		newcomer := c.AddNode(t)
		c.WaitConverged(t, time.Second)

		leaver := c.Node(1)
		queue := "test.message.recorder." + leaver.UUID()
		var deletedWhileInRing []string
		ctx := t.Context()
		stopCheck := make(chan struct{})
		checkDone := make(chan struct{})
		go func() { // watch: the queue must outlive the leaver's membership in every ring
			defer close(checkDone)
			for {
				if _, ok := net.Queue(queue); !ok {
					for _, n := range c.Live() {
						for _, m := range n.Members() {
							if m == leaver.UUID() {
								deletedWhileInRing = append(deletedWhileInRing, n.UUID())
							}
						}
					}
					return
				}
				select {
				case <-stopCheck:
					return
				case <-time.After(100 * time.Microsecond):
				}
			}
		}()
		errs := make(chan error, 200)
		var wg sync.WaitGroup
		for i, res := range uuids(200) {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 100 * time.Microsecond)
				_, err := service.Call[any](ctx, c.Node(0), Touch{Resource: res})
				errs <- err
			})
		}
		require.NoError(t, c.Stop(leaver.UUID()))
		wg.Wait()
		close(errs)
		close(stopCheck)
		<-checkDone
		for err := range errs {
			assert.NoError(t, err, "a call during an orderly leave must succeed (re-routed if needed)")
		}
		assert.Empty(t, deletedWhileInRing, "the leaver's queue was deleted while these rings still held it")
		qi, ok := net.Queue(queue)
		assert.False(t, ok, "the leaver's queues are deleted: %+v", qi)
		c.WaitConverged(t, time.Second)
		assert.NotContains(t, newcomer.Members(), leaver.UUID())
		mu.Lock()
		assert.Empty(t, violations)
		mu.Unlock()
	})
}

// TestEvictedNodeStopsServing: a live node that was evicted notices,
// refuses messages, tells its EvictionListeners and, with NoRejoin, Run
// returns ErrEvicted.
func TestEvictedNodeStopsServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newJournal()
		c, recs := startCluster(t, 3, j, servicetest.Options{NoRejoin: true})
		victim := c.Node(2)
		c.StopHeartbeat(victim.UUID())
		c.WaitGone(t, victim.UUID(), time.Second)
		c.ResumeHeartbeat(victim.UUID())
		<-victim.Done()
		assert.True(t, recs[2].evicted.Load(), "EvictionListener ran")
		assert.True(t, errors.Is(service.ErrEvicted, heartbeat.ErrEvicted))
		// Survivors own everything.
		for _, res := range uuids(50) {
			_, err := service.Call[any](t.Context(), c.Node(0), Touch{Resource: res})
			require.NoError(t, err)
		}
	})
}

// TestRingListenerSeesChanges: services hear of joins and leaves, off the
// message path, and can take over what they now own.
func TestRingListenerSeesChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newJournal()
		resources := uuids(300)
		var mu sync.Mutex
		owned := map[string]string{} // resource -> node that took it over
		c, recs := startCluster(t, 3, j, servicetest.Options{})
		for _, r := range recs {
			r.setOnRing(func(n *service.Node, ch service.RingChange) {
				mu.Lock()
				defer mu.Unlock()
				for _, res := range resources {
					if n.Owns(res) {
						owned[res] = n.UUID()
					}
				}
			})
		}
		victim := c.Node(0)
		var victims []string
		for _, res := range resources {
			if c.Owner(res) == victim.UUID() {
				victims = append(victims, res)
			}
		}
		c.Kill(victim.UUID())
		c.WaitGone(t, victim.UUID(), time.Second)
		c.WaitConverged(t, time.Second)
		c.WaitFor(t, time.Second, "survivors took over every resource of the dead node", func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, res := range victims {
				if owned[res] != c.Owner(res) || owned[res] == victim.UUID() {
					return false
				}
			}
			return true
		})
		assert.Positive(t, recs[1].changes.Load())
	})
}

// TestCallValidation: bad UUIDs and stopped nodes give coded errors.
func TestCallValidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := startCluster(t, 1, newJournal(), servicetest.Options{})
		n := c.Node(0)
		_, err := service.Call[any](t.Context(), n, Touch{Resource: "not-a-uuid"})
		assert.ErrorIs(t, err, message.ErrInvalidUUID)
		res := message.NewUUID()
		dashed := res[:8] + "-" + res[8:12] + "-" + res[12:16] + "-" + res[16:20] + "-" + res[20:]
		o1, _ := n.Owner(res)
		o2, _ := n.Owner(dashed)
		assert.Equal(t, o1, o2)
		_, err = service.Call[any](t.Context(), n, Touched{})
		assert.ErrorIs(t, err, message.ErrNoRoute, "no service handles the type")

		_, err = service.NewNode(service.Config{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "Transport is required")
		assert.Contains(t, err.Error(), "Store is required")
		assert.Equal(t, "serving", service.StateServing.String())
		assert.Equal(t, driver.TransportConnected, n.TransportState())
		_ = context.Background()
	})
}

// TestEvictedNodeRejoins: a live node that was evicted (its heartbeat
// could not reach the store) fences itself before peers evict it, stops
// serving when it learns of the eviction, and joins again with a new
// epoch; every ring then holds it again and it owns resources again.
func TestEvictedNodeRejoins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hb := heartbeat.TestConfig()
		j := newJournal()
		c, recs := startCluster(t, 3, j, servicetest.Options{Heartbeat: hb})
		victim := c.Node(2)
		epoch := victim.Epoch()
		cut := time.Now()
		c.StopHeartbeat(victim.UUID())
		c.WaitFor(t, hb.EvictAfter, "the cut-off node fences itself", victim.LeaseExpired)
		fencedAfter := time.Since(cut)
		assert.Less(t, fencedAfter, hb.EvictAfter, "it must fence itself before peers may evict it")
		res := message.NewUUID()
		for ; ; res = message.NewUUID() {
			if o, _ := victim.Owner(res); o == victim.UUID() {
				break
			}
		}
		_, err := bus.Call[any](t.Context(), victim.Bus(), victim.Bus().LocalID("recorder"), Touch{Resource: res}, bus.WithResource(res))
		assert.ErrorIs(t, err, message.ErrNotOwner, "a fenced node refuses resource messages")

		c.WaitGone(t, victim.UUID(), time.Second)
		c.ResumeHeartbeat(victim.UUID())
		c.WaitFor(t, time.Second, "the evicted node rejoins with a new epoch", func() bool {
			return victim.State() == service.StateServing && victim.Epoch() != epoch
		})
		c.WaitConverged(t, time.Second)
		for _, n := range c.Live() {
			assert.Contains(t, n.Members(), victim.UUID())
		}
		assert.True(t, recs[2].evicted.Load(), "EvictionListener ran")
		assert.False(t, victim.LeaseExpired())
		got, err := service.Call[Touched](t.Context(), c.Node(0), Touch{Resource: res})
		require.NoError(t, err)
		assert.Equal(t, victim.UUID(), got.Node, "the rejoined node owns its resources again")
		t.Logf("fenced %s after its heartbeat was cut (lease %s, eviction %s)", fencedAfter, hb.Lease, hb.EvictAfter)
	})
}

// TestRejoinedNodeKeepsItsCalls: a peer evicts a node cut off from the
// store, and the third node sees its record vanish; the calls that node
// had pending towards it are failed with node_left LeaveTimeout (10 s)
// later, but only those sent to its old life: calls sent after it
// rejoined run to their end (they were failed too, 10 s after the
// vanishing, found by TestFastPathSparesTheLiving).
func TestRejoinedNodeKeepsItsCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hb := heartbeat.TestConfig()
		j := newJournal()
		c, _ := startCluster(t, 3, j, servicetest.Options{Heartbeat: hb})
		victim := c.Node(2)
		epoch := victim.Epoch()
		c.StopHeartbeat(victim.UUID())
		c.WaitGone(t, victim.UUID(), time.Second)
		c.ResumeHeartbeat(victim.UUID())
		c.WaitFor(t, time.Second, "the evicted node rejoins with a new epoch", func() bool {
			return victim.State() == service.StateServing && victim.Epoch() != epoch
		})
		c.WaitConverged(t, time.Second)
		res := ownedBy(c, victim.UUID())
		hold := make(chan struct{})
		j.mu.Lock()
		j.hold = hold
		j.mu.Unlock()
		errs := make(chan error, 2)
		for _, n := range []*service.Node{c.Node(0), c.Node(1)} { // one evicted it, the other saw its record vanish
			go func() {
				got, err := service.Call[Touched](t.Context(), n, Touch{Resource: res}, bus.WithTimeout(time.Minute))
				if err == nil && got.Node != victim.UUID() {
					err = fmt.Errorf("handled on %s, not on the owner %s", got.Node, victim.UUID())
				}
				errs <- err
			}()
		}
		time.Sleep(15 * time.Second) // past LeaveTimeout from the vanishing
		close(hold)
		for range 2 {
			require.NoError(t, <-errs, "a call to the node's new life is not failed for its old life's leave")
		}
	})
}

// TestPortalUnderSaturation: API portal handlers wait for the owner's
// reply; when the owner is the portal's own node, the service's handlers
// must not need the slots the waiting portal handlers hold. With two
// slots and twenty concurrent API calls, every call succeeds.
func TestPortalUnderSaturation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newJournal()
		c, _ := startCluster(t, 1, j, servicetest.Options{Limits: bus.Limits{MaxConcurrency: 2}})
		client := c.Client(t)
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for _, res := range uuids(20) {
			wg.Go(func() {
				_, err := service.Call[Touched](t.Context(), client, APITouch{Resource: res}, bus.WithTimeout(5*time.Second))
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		assert.Len(t, j.all(), 20)
	})
}

// failLogger logs to the test's output, shown when it fails (or with -v).
func failLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// TestLeaveEmptiesQueuesAcrossABrokerDrop: a broker connection lost while
// a leaving node empties its own queue does not leave the queue behind:
// the node tries again once the connection is back.
func TestLeaveEmptiesQueuesAcrossABrokerDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := startCluster(t, 2, newJournal(), servicetest.Options{})
		n := c.Node(0)
		id := bus.ServiceID("recorder", n.UUID())
		q := busx.Of(n.Bus()).QueueName(id)
		require.NoError(t, busx.Of(n.Bus()).Unregister(t.Context(), id, false), "nobody consumes the queue, as after the leave's drain")
		c.Partition(n.UUID(), true)
		type result struct {
			moved int
			err   error
		}
		done := make(chan result, 1)
		go func() {
			moved, err := n.RerouteOwn(t.Context(), q)
			done <- result{moved, err}
		}()
		time.Sleep(100 * time.Millisecond) // virtual, within the lease: the first attempt failed and waits for the broker
		select {
		case r := <-done:
			t.Fatalf("rerouteOwn returned during the partition: %d moved, %v", r.moved, r.err)
		default:
		}
		c.Partition(n.UUID(), false)
		r := <-done
		require.NoError(t, r.err, "the second attempt, after the broker came back, empties the queue")
		_, ok := c.Network().Queue(q)
		assert.False(t, ok, "the queue is deleted")
	})
}

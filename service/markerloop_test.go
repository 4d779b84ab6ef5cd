package service_test

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/internal/busx"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// LocalJob is a message for the "local" service, which only one node of
// the test runs: when that node is evicted, no survivor can take it.
type LocalJob struct {
	Seq int `json:"seq"`
}

// localService is a service that runs on one node only. Its handler
// holds every message until open is called.
type localService struct {
	gate     chan struct{}
	openOnce sync.Once
	mu       sync.Mutex
	ran      int
}

func newLocalService() *localService { return &localService{gate: make(chan struct{})} }

func (s *localService) Name() string { return "local" }

func (s *localService) Handle(ctx context.Context, r *bus.Request) (any, error) {
	select {
	case <-s.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	s.ran++
	s.mu.Unlock()
	return nil, nil
}

// open lets the held messages and every later one run. It is idempotent.
func (s *localService) open() { s.openOnce.Do(func() { close(s.gate) }) }

func (s *localService) runs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ran
}

// TestEvictedConsumerDoesNotSpinOnDrainMarkers: a node that lost its
// database but not its bus is evicted while it still consumes its
// queues, and the survivor draining them leaves a drain marker behind in
// one of them (the round failed on a message no survivor can take: its
// service runs only on the evicted node). The evicted node is then that
// queue's only consumer and receives a marker that is not its own: it
// must give it back after a pause, not at once. Handed straight back,
// the marker went round between the in-memory broker and the node
// without ever blocking, which burned a CPU in real time and stopped
// virtual time in a synctest bubble: the test hung. Here virtual time
// goes on, and once the node can reach the database again and learns of
// its eviction, the survivors take over the rest of its queue, all
// within a bounded virtual time and a bounded real time.
func TestEvictedConsumerDoesNotSpinOnDrainMarkers(t *testing.T) {
	const realLimit = 30 * time.Second // the test takes well under a second
	watchdog := time.AfterFunc(realLimit, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("%s still running after %v of real time: virtual time stood still, so some goroutine of the bubble "+
			"never blocks (a drain marker handed straight back to a queue's only consumer?); the goroutines follow", t.Name(), realLimit))
	})
	defer watchdog.Stop()

	synctest.Test(t, func(t *testing.T) {
		hb := heartbeat.TestConfig()
		const (
			prefetch = 8  // per consumer: the evicted node holds at most this many messages of a queue
			sent     = 20 // one-way messages queued for the evicted node's recorder
		)
		j := newJournal()
		local := newLocalService()
		reg := registry()
		message.MustRegister[LocalJob](reg, "svctest.v1.LocalJob")
		c := servicetest.Start(t, servicetest.Options{
			Nodes:    3,
			Registry: reg,
			Limits:   bus.Limits{Prefetch: prefetch},
			NoRejoin: true, // once it learns of its eviction it stops, leaving its queues to the survivors
			Services: func(i int, _ nodekit.Env) []service.Service {
				if i == 2 {
					return []service.Service{newRecorder(j), local}
				}
				return []service.Service{newRecorder(j)}
			},
		})
		t.Cleanup(local.open) // runs before the cluster closes
		evicted := c.Node(2)
		id := evicted.UUID()
		recorderQueue := busx.Of(evicted.Bus()).QueueName(bus.ServiceID("recorder", id))
		localQueue := busx.Of(evicted.Bus()).QueueName(bus.ServiceID("local", id))
		sender := c.Node(0).Bus()
		start := time.Now()

		c.StopHeartbeat(id)
		c.WaitFor(t, hb.EvictAfter, "the node cut off from the database fences itself", evicted.LeaseExpired)
		// Sent while it is fenced: it holds the recorder messages (up to
		// the prefetch), giving each back now and then, and holds the
		// local ones until the gate opens; one local message waits in the
		// queue, for the survivor's drain to find.
		var resources []string
		for range sent {
			res := message.NewUUID()
			resources = append(resources, res)
			require.NoError(t, sender.Send(t.Context(), bus.ServiceID("recorder", id), Touch{Resource: res}))
		}
		for i := range prefetch + 1 {
			require.NoError(t, sender.Send(t.Context(), bus.ServiceID("local", id), LocalJob{Seq: i}))
		}

		c.WaitGone(t, id, 2*hb.EvictAfter)
		evictedAfter := time.Since(start)
		assert.Equal(t, service.StateServing, evicted.State(), "the evicted node does not know yet: it still consumes its queues")
		// The survivor drains the queues one by one; each one the evicted
		// node consumes takes 20 rounds 50 ms apart before it gives up on
		// it until its next sweep.
		c.WaitFor(t, 20*hb.EvictAfter, "a survivor's drain round on the local queue failed, leaving its marker there", func() bool {
			q, ok := c.Network().Queue(localQueue)
			return ok && q.Ready >= 2 // the local message it could not move, and its marker
		})
		markerLeftAfter := time.Since(start)
		require.Zero(t, local.runs(), "the evicted node still holds its local messages")

		// The evicted node runs its local messages, then receives the
		// marker: it is the queue's only consumer now.
		local.open()
		c.WaitFor(t, hb.EvictAfter, "the evicted node runs every local message", func() bool { return local.runs() == prefetch+1 })
		time.Sleep(2 * hb.EvictAfter) // virtual time goes on: nothing spins
		q, ok := c.Network().Queue(localQueue)
		require.True(t, ok)
		// The evicted node still consumes it; a survivor's drain may too
		// for a moment (it drains an absent node's queues at every sweep
		// until it deletes them).
		assert.GreaterOrEqual(t, q.Consumers, 1, "the evicted node still consumes the local queue")

		// Reaching the database again, it learns of its eviction and
		// stops; the survivors move what it still held.
		c.ResumeHeartbeat(id)
		select {
		case <-evicted.Done():
		case <-time.After(2 * hb.EvictAfter):
			t.Fatalf("the evicted node did not stop within %v of reaching the database again (state %s)", 2*hb.EvictAfter, evicted.State())
		}
		require.ErrorIs(t, evicted.Err(), service.ErrEvicted)
		c.WaitFor(t, 5*hb.EvictAfter, "every recorder message is handled by a survivor", func() bool { return len(j.all()) >= sent })
		c.WaitFor(t, 5*hb.EvictAfter, "the evicted node's recorder queue is drained and deleted", func() bool {
			_, ok := c.Network().Queue(recorderQueue)
			return !ok
		})
		c.WaitConverged(t, hb.EvictAfter)
		took := time.Since(start)

		handled := map[string]string{}
		for _, h := range j.all() {
			assert.NotEqual(t, id, h.node, "the fenced node ran %s", h.resource)
			handled[h.resource] = h.node
		}
		for _, res := range resources {
			assert.Equal(t, c.Owner(res), handled[res], "resource %s handled by its owner among the survivors", res)
		}
		t.Logf("evicted after %v, marker left in its local queue after %v, all done after %v (virtual; eviction threshold %v)",
			evictedAfter, markerLeftAfter, took, hb.EvictAfter)
		assert.Less(t, took, 40*hb.EvictAfter, "bounded virtual time")
	})
}

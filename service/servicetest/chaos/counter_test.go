package chaos_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/cloudbus-go/cloudbus/service/servicetest/chaos"
)

// The counter service's messages.
type (
	// Add adds N to a counter.
	Add struct {
		Key string `json:"key"`
		N   int64  `json:"n"`
	}
	// Get reads a counter.
	Get struct {
		Key string `json:"key"`
	}
	// Count answers both: Get's value.
	Count struct {
		Value int64 `json:"value"`
	}
)

func (m Add) ResourceUUID() string { return m.Key }
func (m Get) ResourceUUID() string { return m.Key }

// counters is the counter service: every operation runs through the
// fence, which also records each message's reply by its id, so that a
// message delivered or sent again (bus.WithID) runs once.
type counters struct {
	*bus.Mux
	fence *atomic.Pointer[memfence.Fence]
	mu    sync.Mutex
	vals  map[string]int64 // the "database", shared by every node
}

func (s *counters) Name() string       { return "counters" }
func (s *counters) APIMessages() []any { return []any{Add{}, Get{}} }

func newCounters(fp *atomic.Pointer[memfence.Fence], db *counters, rec *chaos.Recorder) *counters {
	s := &counters{Mux: bus.NewMux(), fence: fp}
	bus.Handle(s.Mux, func(ctx context.Context, r *bus.Request, m Add) (Count, error) {
		return memfence.Run(ctx, fp.Load(), fence.For(ctx, r), func(context.Context, fence.Token) (Count, func(), error) {
			return Count{}, func() {
				db.mu.Lock()
				db.vals[m.Key] += m.N
				db.mu.Unlock()
				rec.Commit(r.ID(), r.Node(), time.Now())
			}, nil
		})
	})
	bus.Handle(s.Mux, func(ctx context.Context, r *bus.Request, m Get) (Count, error) {
		return memfence.Run(ctx, fp.Load(), fence.For(ctx, r), func(context.Context, fence.Token) (Count, func(), error) {
			db.mu.Lock()
			defer db.mu.Unlock()
			return Count{Value: db.vals[m.Key]}, nil, nil
		})
	})
	return s
}

// countRun runs clients adding to and reading counters under a nemesis;
// each add whose outcome is unknown is sent again, up to 3 times, with
// its first message id, or with a new one if newIDs (the flaw: a retry
// that is not idempotent).
func countRun(t *testing.T, seed uint64, ops int, newIDs bool) (chaos.Report, chaos.Audit, chaos.NemesisReport) {
	var fp atomic.Pointer[memfence.Fence]
	db := &counters{vals: map[string]int64{}}
	rec := chaos.NewRecorder(nil)
	reg := message.NewRegistry()
	message.MustRegister[Add](reg, "chaostest.v1.Add")
	message.MustRegister[Get](reg, "chaostest.v1.Get")
	message.MustRegister[Count](reg, "chaostest.v1.Count")
	c := servicetest.Start(t, servicetest.Options{
		Nodes: 5, Registry: reg,
		Services: func(int, nodekit.Env) []service.Service { return []service.Service{newCounters(&fp, db, rec)} },
	})
	fp.Store(memfence.New(c.Store(), memfence.Config{MaxAge: c.Node(0).Heartbeat().Lease}))
	cl := c.Client(t)
	keys := []string{message.NewUUID(), message.NewUUID()}
	ctx, stop := context.WithCancel(t.Context())
	nem := &chaos.Nemesis{Cluster: c, Seed: seed, Hold: 2 * time.Second}
	var nrep chaos.NemesisReport
	done := make(chan struct{})
	go func() {
		defer close(done)
		nrep, _ = nem.Run(ctx)
	}()
	var issued atomic.Int64
	var wg sync.WaitGroup
	for client := range 6 {
		rng := rand.New(rand.NewPCG(seed, uint64(client)))
		wg.Go(func() {
			for issued.Add(1) <= int64(ops) {
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
				key := keys[rng.IntN(len(keys))]
				var in chaos.CounterOp
				var msg any = Get{Key: key}
				if rng.IntN(2) == 0 {
					in = chaos.CounterOp{Add: 1 + rng.Int64N(5)}
					msg = Add{Key: key, N: in.Add}
				}
				op := rec.Invoke(client, key, in)
				id := rec.ID(op)
				var out Count
				var err error
				var deadline time.Time
				for try := 0; try < 3; try++ {
					if try > 0 && newIDs {
						id = message.NewUUID()
					}
					cctx, cancel := context.WithTimeout(ctx, time.Second)
					deadline, _ = cctx.Deadline()
					out, err = service.Call[Count](cctx, cl, msg, bus.WithResource(key), bus.WithID(id))
					cancel()
					if err == nil || in.Add == 0 || message.CodeOf(err).Retry() != message.RetryUnknown {
						break
					}
				}
				rec.End(op, out.Value, err, deadline)
			}
		})
	}
	wg.Wait()
	stop()
	<-done
	rep, err := chaos.Check(chaos.Counter(0), rec, 10*time.Second, "")
	if err != nil {
		t.Error(err)
	}
	adds := func(in, _ any) bool { return in.(chaos.CounterOp).Add != 0 } // a read commits nothing
	return rep, rec.Audit(0, adds), nrep
}

package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/cloudbus-go/cloudbus/service/servicetest/chaos"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The register service's messages: each about one register, routed to
// its owner by its UUID.
type (
	// Write sets a register.
	Write struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	// CAS sets a register to Value if it holds Expect.
	CAS struct {
		Key    string `json:"key"`
		Expect string `json:"expect"`
		Value  string `json:"value"`
	}
	// Read reads a register.
	Read struct {
		Key string `json:"key"`
	}
	// Reply answers each: a Read's value, a CAS's swap.
	Reply struct {
		Value   string `json:"value,omitempty"`
		Swapped bool   `json:"swapped,omitempty"`
	}
)

func (m Write) ResourceUUID() string { return m.Key }
func (m CAS) ResourceUUID() string   { return m.Key }
func (m Read) ResourceUUID() string  { return m.Key }

func registry() *message.Registry {
	reg := message.NewRegistry()
	message.MustRegister[Write](reg, "chaostest.v1.Write")
	message.MustRegister[CAS](reg, "chaostest.v1.CAS")
	message.MustRegister[Read](reg, "chaostest.v1.Read")
	message.MustRegister[Reply](reg, "chaostest.v1.Reply")
	return reg
}

// table is the registers' "database", shared by every node as a real
// one would be.
type table struct {
	mu   sync.Mutex
	vals map[string]string
}

func (t *table) get(k string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.vals[k]
}

func (t *table) set(k, v string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.vals[k] = v
}

// flaw is a deliberate mistake in the register service.
type flaw int

const (
	correct    flaw = iota
	nodeMemory      // keeps the registers in the node's memory, not the table
	unfenced        // reads and writes the table without the fence
)

// registers is the register service: every operation runs through the
// fence (the claim the node gave the message), so only the register's
// owner of the moment reads or writes it.
type registers struct {
	*bus.Mux
	flaw  flaw
	fence *atomic.Pointer[memfence.Fence]
	db    *table
	mem   *table          // the node's own, for the nodeMemory flaw
	rec   *chaos.Recorder // told of each commit, if not nil
}

func (s *registers) Name() string       { return "registers" }
func (s *registers) APIMessages() []any { return []any{Write{}, CAS{}, Read{}} }

func newRegisters(f flaw, fp *atomic.Pointer[memfence.Fence], db *table, rec *chaos.Recorder) *registers {
	s := &registers{Mux: bus.NewMux(), flaw: f, fence: fp, db: db, mem: &table{vals: map[string]string{}}, rec: rec}
	bus.Handle(s.Mux, func(ctx context.Context, r *bus.Request, m Write) (Reply, error) {
		return s.run(ctx, r, m.Key, func(old string) (string, Reply) { return m.Value, Reply{} })
	})
	bus.Handle(s.Mux, func(ctx context.Context, r *bus.Request, m CAS) (Reply, error) {
		return s.run(ctx, r, m.Key, func(old string) (string, Reply) {
			if old != m.Expect {
				return old, Reply{}
			}
			return m.Value, Reply{Swapped: true}
		})
	})
	bus.Handle(s.Mux, func(ctx context.Context, r *bus.Request, m Read) (Reply, error) {
		return s.run(ctx, r, m.Key, func(old string) (string, Reply) { return old, Reply{Value: old} })
	})
	return s
}

// run applies op to register key: it reads the old value, and writes
// the new one if it differs, under the fence.
func (s *registers) run(ctx context.Context, r *bus.Request, key string, op func(old string) (string, Reply)) (Reply, error) {
	committed := func() {
		if s.rec != nil {
			s.rec.Commit(r.ID(), r.Node(), time.Now())
		}
	}
	switch s.flaw {
	case nodeMemory:
		nv, rep := op(s.mem.get(key))
		s.mem.set(key, nv)
		committed()
		return rep, nil
	case unfenced:
		old := s.db.get(key)
		nv, rep := op(old)
		if nv != old {
			s.db.set(key, nv)
		}
		committed()
		return rep, nil
	}
	return memfence.Run(ctx, s.fence.Load(), fence.For(ctx, r), func(context.Context, fence.Token) (Reply, func(), error) {
		old := s.db.get(key)
		nv, rep := op(old)
		return rep, func() {
			if nv != old {
				s.db.set(key, nv)
			}
			committed()
		}, nil
	})
}

// run is one chaos run: nodes of the register service with flaw f,
// clients issuing ops operations on keys registers while a nemesis
// seeded with seed injects faults; it returns the check's report and
// the nemesis's.
type run struct {
	flaw    flaw
	seed    uint64
	nodes   int
	clients int
	ops     int
	keys    int
	dir     string // for visualizations
	faults  []chaos.Fault
	hold    time.Duration // the nemesis's Hold
	offset  time.Duration // the nemesis's Offset
}

type runResult struct {
	check    chaos.Report
	audit    chaos.Audit
	nemesis  chaos.NemesisReport
	outcomes map[chaos.Outcome]int
	overdue  int // calls that ended after their deadline
}

func (rn run) do(t *testing.T) runResult {
	t.Helper()
	var fp atomic.Pointer[memfence.Fence]
	db := &table{vals: map[string]string{}}
	rec := chaos.NewRecorder(nil)
	c := servicetest.Start(t, servicetest.Options{
		Nodes:    rn.nodes,
		Registry: registry(),
		Services: func(int, nodekit.Env) []service.Service {
			return []service.Service{newRegisters(rn.flaw, &fp, db, rec)}
		},
	})
	hb := c.Node(0).Heartbeat()
	fp.Store(memfence.New(c.Store(), memfence.Config{MaxAge: hb.Lease}))
	cl := c.Client(t)

	keys := make([]string, rn.keys)
	for i := range keys {
		keys[i] = message.NewUUID()
	}
	ctx, stop := context.WithCancel(t.Context())
	nem := &chaos.Nemesis{Cluster: c, Seed: rn.seed, Faults: rn.faults, Hold: rn.hold, Offset: rn.offset}
	var nrep chaos.NemesisReport
	var nerr error
	nemDone := make(chan struct{})
	go func() {
		defer close(nemDone)
		nrep, nerr = nem.Run(ctx)
	}()

	var issued atomic.Int64
	var wg sync.WaitGroup
	for client := range rn.clients {
		rng := rand.New(rand.NewPCG(rn.seed, uint64(client)))
		wg.Go(func() {
			last := map[string]string{} // the last value this client saw per key, for its CAS
			for n := 0; issued.Add(1) <= int64(rn.ops); n++ {
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // think (virtual time)
				key := keys[rng.IntN(len(keys))]
				value := fmt.Sprintf("c%d.%d", client, n)
				var in chaos.RegisterOp
				var msg any
				switch p := rng.IntN(10); {
				case p < 5:
					in, msg = chaos.RegisterOp{Kind: chaos.Read}, Read{Key: key}
				case p < 8:
					in, msg = chaos.RegisterOp{Kind: chaos.Write, Value: value}, Write{Key: key, Value: value}
				default:
					in, msg = chaos.RegisterOp{Kind: chaos.CAS, Expect: last[key], Value: value}, CAS{Key: key, Expect: last[key], Value: value}
				}
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				deadline, _ := cctx.Deadline()
				op := rec.Invoke(client, key, in)
				rep, err := service.Call[Reply](cctx, cl, msg, bus.WithResource(key), bus.WithID(rec.ID(op)))
				cancel()
				out := chaos.RegisterOutput{Value: rep.Value, Swapped: rep.Swapped}
				if in.Kind == chaos.Read && err == nil {
					last[key] = rep.Value
				}
				if ctx.Err() != nil && err != nil {
					rec.Unknown(op, deadline) // the test ended the call
					return
				}
				if rec.End(op, out, err, deadline) != chaos.OK {
					time.Sleep(10 * time.Millisecond) // back off (virtual time)
				}
			}
		})
	}
	wg.Wait()
	stop()
	<-nemDone
	if nerr != nil {
		t.Fatalf("the nemesis: %v", nerr)
	}
	rep, err := chaos.Check(chaos.Register(""), rec, 10*time.Second, rn.dir)
	if err != nil {
		t.Errorf("check: %v", err)
	}
	return runResult{check: rep, audit: rec.Audit(0, nil), nemesis: nrep, outcomes: rec.Counts(), overdue: rec.Overdue(0)}
}

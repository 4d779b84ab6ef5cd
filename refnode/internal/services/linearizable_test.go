package services_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/memdb"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/ring/ringtest"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/cloudbus-go/cloudbus/service/servicetest/chaos"
)

// The chaos test's sizes: small enough for porcupine to decide each
// image's history in well under a second.
const (
	chaosImages     = 3                      // registers
	chaosClients    = 3                      // per image, each its own client process
	chaosOpTimeout  = 400 * time.Millisecond // each call's deadline: longer than an eviction (300 ms)
	chaosMaxPause   = 20 * time.Millisecond  // between a client's calls, at random
	chaosFaultHold  = 600 * time.Millisecond // how long each fault lasts
	chaosInitName   = "init"
	chaosCheckLimit = time.Minute // porcupine's limit per image; an inconclusive check fails the test
)

// chaosCluster is a 3-node in-memory cluster whose nodes reach one memdb
// store through views, so that a killed node is cut off the store as a
// dead process is.
type chaosCluster struct {
	c  *servicetest.Cluster
	db *memdb.Store
}

func (cc *chaosCluster) view(i int) string { return fmt.Sprintf("node-%d", i) }

// kill crashes the node with UUID id and cuts it off the store, as a
// dead process writes nothing more.
func (cc *chaosCluster) kill(t *testing.T, id string) {
	t.Helper()
	require.NotNil(t, cc.c.NodeByUUID(id), "no node %s", id)
	i := 0
	for cc.c.Node(i).UUID() != id { // its start index names its view
		i++
	}
	cc.c.Kill(id)
	cc.db.SetUnreachable(cc.view(i), true)
}

// staller pauses the SetImageName that writes one name, inside its
// transaction after the fence's check (services.Config.StallImageWrite),
// until released, as a process paused by SIGSTOP: it does not see its
// deadline meanwhile.
type staller struct {
	mu      sync.Mutex
	name    string        // the name whose writer stalls, once
	stalled chan struct{} // closed when it stalled
	release chan struct{} // closed by free to let it go on
}

func (s *staller) arm(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.name, s.stalled, s.release = name, make(chan struct{}), make(chan struct{})
}

// free lets the stalled writer go on; it is idempotent.
func (s *staller) free() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.name = "" // no writer stalls any more
	if s.release != nil {
		close(s.release)
		s.release = nil
	}
}

func (s *staller) stall(_ context.Context, _, name string) {
	s.mu.Lock()
	if s.name == "" || name != s.name {
		s.mu.Unlock()
		return
	}
	s.name = ""
	stalled, release := s.stalled, s.release
	s.mu.Unlock()
	close(stalled)
	<-release
}

// gate holds a client's calls while closed; closing waits for the calls
// in flight. It blocks only on channels and a WaitGroup, which a
// testing/synctest bubble sees as durably blocked.
type gate struct {
	mu       sync.Mutex
	closed   chan struct{} // nil while open
	inFlight sync.WaitGroup
}

func (g *gate) enter() {
	for {
		g.mu.Lock()
		ch := g.closed
		if ch == nil {
			g.inFlight.Add(1)
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		<-ch
	}
}

func (g *gate) leave() { g.inFlight.Done() }

func (g *gate) close() {
	g.mu.Lock()
	g.closed = make(chan struct{})
	g.mu.Unlock()
	g.inFlight.Wait()
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.closed)
	g.closed = nil
}

// outcomes counts how the calls ended, by kind of call and reply (a
// finer count than the recorder's, by outcome).
type outcomes struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *outcomes) add(k string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n[k]++
}

func (o *outcomes) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(o.n)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, o.n[k]))
	}
	return strings.Join(parts, ", ")
}

// chaosClient runs calls on one image until stop ends, recording each
// in rec under the image's UUID: reads (GetImage), writes of unique
// names (SetImageName) and compare-and-sets from the last name it saw
// (SetImageName with if_name). Client 0 calls without retries, so it
// sees node_left; the others let the portal resend a call whose owner
// left (bus.WithRetry). [chaos.Recorder.End] sorts each call's end by
// its error's retry class: one that failed before it ran
// (message.RetrySafe or RetryNever) is left out of the history, one
// whose outcome is unknown is recorded as possibly applied up to its
// deadline.
func chaosClient(t *testing.T, stop context.Context, cl *service.Client, img string, client int, g *gate, rec *chaos.Recorder, out *outcomes, rng *rand.Rand) {
	last := chaosInitName
	var opts []bus.Option
	if client > 0 {
		opts = append(opts, bus.WithRetry(2))
	}
	for n := 0; stop.Err() == nil; n++ {
		time.Sleep(time.Duration(rng.Int64N(int64(chaosMaxPause))))
		g.enter()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(stop), chaosOpTimeout)
		deadline, _ := ctx.Deadline()
		value := fmt.Sprintf("c%d.%d", client, n)
		var in chaos.RegisterOp
		switch p := rng.IntN(10); {
		case p < 4:
			in = chaos.RegisterOp{Kind: chaos.Read}
		case p < 7:
			in = chaos.RegisterOp{Kind: chaos.Write, Value: value}
		default:
			in = chaos.RegisterOp{Kind: chaos.CAS, Expect: last, Value: value}
		}
		op := rec.Invoke(client, img, in)
		var res chaos.RegisterOutput
		var err error
		if in.Kind == chaos.Read {
			var rep api.ImageReply
			rep, err = service.Call[api.ImageReply](ctx, cl, api.GetImage{UUID: img}, opts...)
			res.Value, last = rep.Image.Name, rep.Image.Name
		} else {
			m := api.SetImageName{UUID: img, Name: in.Value}
			if in.Kind == chaos.CAS {
				m.IfName = &in.Expect
			}
			var rep api.ImageNameSet
			rep, err = service.Call[api.ImageNameSet](ctx, cl, m, opts...)
			if in.Kind == chaos.CAS {
				res.Swapped = rep.Set // a write returns the zero RegisterOutput
			}
			last = rep.Image.Name
		}
		cancel()
		g.leave()
		kind := in.Kind.String()
		switch rec.End(op, res, err, deadline) {
		case chaos.OK:
			switch {
			case in.Kind != chaos.CAS:
				out.add(kind + " ok")
			case res.Swapped:
				out.add("cas swapped")
			default:
				out.add("cas not swapped")
			}
		case chaos.Failed:
			code := message.CodeOf(err)
			out.add(kind + " " + string(code))
			if message.AsError(err).Retry() == message.RetryNever {
				t.Errorf("%s on image %s failed with %s, which no fault should cause: %v", kind, img, code, err)
			}
		default:
			out.add(kind + " " + string(message.CodeOf(err)))
			if in.Kind != chaos.Read {
				last = "" // unknown
			}
		}
	}
}

// TestImageNamesLinearizable is the per-resource register of the chaos
// test ("linearizable per resource, nothing lost, no late or double
// execution") on an in-memory cluster in virtual time: 3 nodes on memdb
// and memfence, 3 images, 3 clients per image reading, writing unique
// names and compare-and-setting them, while nodes are killed (and
// replaced), partitioned off the bus, cut off the heartbeat store and
// silently lose their traffic, and a writer is paused inside its
// transaction while its node is evicted. Every call is recorded (unknown
// outcomes as possibly applied up to their deadline) in one
// chaos.Recorder, keyed by image, and each image's history must be
// linearizable against the chaos kit's register (chaos.Check, with
// porcupine). It runs on each ring a node can use.
func TestImageNamesLinearizable(t *testing.T) {
	for _, r := range ringtest.Kinds() {
		t.Run(r.Name, func(t *testing.T) { imageNamesLinearizable(t, r.New) })
	}
}

func imageNamesLinearizable(t *testing.T, newRing func() ring.Ring) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rec := chaos.NewRecorder(time.Now) // inside the bubble, its clock
	var imgs []string
	out := &outcomes{n: map[string]int{}}
	var virtual time.Duration
	synctest.Test(t, func(t *testing.T) {
		reg := message.NewRegistry()
		require.NoError(t, api.Register(reg))
		hv, err := simhv.New(simhv.Config{})
		require.NoError(t, err)
		cc := &chaosCluster{db: memdb.New()}
		st := &staller{}
		cc.c = servicetest.Start(t, servicetest.Options{Nodes: 3, Registry: reg, NewRing: newRing, Services: func(i int, _ nodekit.Env) []service.Service {
			s, err := services.New(services.Config{Store: cc.db.For(cc.view(i)), Hypervisor: hv, PingInterval: pingInterval,
				StallImageWrite: st.stall})
			if err != nil {
				panic(err)
			}
			return s.Services()
		}})
		t.Cleanup(st.free) // before the cluster closes, should the test fail while a writer stalls
		cc.db.UseFence(cc.c.Store(), memfence.Config{MaxAge: heartbeat.TestConfig().EvictAfter})
		admin := cc.c.Client(t)
		ctx := t.Context()
		// One image owned by each node, so that each fault below hits
		// another node.
		imgs = make([]string, chaosImages)
		for k := range imgs {
			for imgs[k] == "" || cc.c.Owner(imgs[k]) != cc.c.Node(k%3).UUID() {
				imgs[k] = message.NewUUID()
			}
			_, err := service.Call[api.ImageReply](ctx, admin, api.AddImage{UUID: imgs[k], Name: chaosInitName})
			require.NoError(t, err)
		}

		began := time.Now()
		stop, stopClients := context.WithCancel(ctx)
		var wg sync.WaitGroup
		gates := make([]gate, chaosImages)
		for k, img := range imgs {
			for j := range chaosClients {
				cl := cc.c.Client(t)
				rng := rand.New(rand.NewPCG(seed, uint64(k*chaosClients+j)))
				wg.Go(func() { chaosClient(t, stop, cl, img, j, &gates[k], rec, out, rng) })
			}
		}

		// The faults, one after another, each on the owner of an image
		// while clients use it.
		pause := func() { time.Sleep(300 * time.Millisecond) }
		settle := func(what string, id string) {
			cc.c.WaitGone(t, id, 2*time.Second)
			cc.c.WaitConverged(t, 2*time.Second)
			t.Logf("%s %s: evicted and rings agree %s after the start", what, id[:8], time.Since(began))
		}
		pause()
		victim := cc.c.Owner(imgs[0])
		cc.kill(t, victim)
		settle("killed", victim)
		cc.c.AddNode(t) // its replacement
		cc.c.WaitConverged(t, 2*time.Second)
		pause()

		parted := cc.c.Owner(imgs[1])
		cc.c.Partition(parted, true)
		settle("partitioned", parted)
		time.Sleep(chaosFaultHold)
		cc.c.Partition(parted, false)
		cc.c.WaitFor(t, 2*time.Second, "the partitioned node rejoined", func() bool { return slices.Contains(cc.c.LiveUUIDs(), parted) })
		cc.c.WaitConverged(t, 2*time.Second)
		pause()

		cut := cc.c.Owner(imgs[2])
		cc.c.StopHeartbeat(cut)
		settle("cut off the heartbeat store", cut)
		time.Sleep(chaosFaultHold)
		cc.c.ResumeHeartbeat(cut)
		cc.c.WaitFor(t, 2*time.Second, "the cut-off node rejoined", func() bool { return slices.Contains(cc.c.LiveUUIDs(), cut) })
		cc.c.WaitConverged(t, 2*time.Second)
		pause()

		dropped := cc.c.Owner(imgs[0])
		cc.c.Drop(dropped, true) // silent: it stays live and owns its images, their calls time out
		time.Sleep(chaosFaultHold)
		cc.c.Drop(dropped, false)
		pause()

		victim = cc.c.Owner(imgs[1])
		cc.kill(t, victim)
		settle("killed", victim)
		pause()

		// A writer paused inside its transaction, after its fence check,
		// while its node is cut off the heartbeat store and evicted and
		// the new owner writes the image: once resumed, its write must be
		// refused and not applied. It is called through the paused node
		// itself, whose ring still names it the owner, so the refusal
		// reaches the caller as not_owner (nothing happened) unless the
		// node re-routes the call to the new owner in time, which then
		// runs it; the image's clients wait meanwhile, so that a read right
		// after a refusal would show the write had it been applied.
		k := 2
		g := &gates[k]
		g.close()
		paused := cc.c.Owner(imgs[k])
		const stallName, takeoverName = "stalled-write", "takeover-write"
		st.arm(stallName)
		op := rec.Invoke(chaosClients, imgs[k], chaos.RegisterOp{Kind: chaos.Write, Value: stallName})
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		deadline, _ := sctx.Deadline()
		type result struct {
			rep     api.ImageNameSet
			err     error
			outcome chaos.Outcome
		}
		done := make(chan result, 1)
		go func() { // its end recorded as it returns, which may be before the takeover write below does
			rep, err := service.Call[api.ImageNameSet](sctx, cc.c.NodeByUUID(paused), api.SetImageName{UUID: imgs[k], Name: stallName})
			done <- result{rep, err, rec.End(op, chaos.RegisterOutput{}, err, deadline)}
		}()
		<-st.stalled
		cc.c.StopHeartbeat(paused)
		settle("paused inside a SetImageName transaction, then cut off the heartbeat store", paused)
		op2 := rec.Invoke(chaosClients+1, imgs[k], chaos.RegisterOp{Kind: chaos.Write, Value: takeoverName})
		_, err = service.Call[api.ImageNameSet](ctx, admin, api.SetImageName{UUID: imgs[k], Name: takeoverName})
		require.NoError(t, err, "the new owner writes the image while the old one is paused in its transaction")
		rec.Return(op2, chaos.RegisterOutput{})
		st.free()
		r := <-done
		code := message.CodeOf(r.err)
		switch r.outcome {
		case chaos.OK:
			require.NotEqual(t, paused, r.rep.Node, "the paused node's write is refused: the write that succeeded ran on the new owner")
			t.Logf("the paused writer's call was re-routed to the new owner %s, and ran there, %s after the start", r.rep.Node[:8], time.Since(began))
		case chaos.Failed:
			got, err := cc.db.Image(ctx, imgs[k])
			require.NoError(t, err)
			assert.Equal(t, takeoverName, got.Name, "the paused node's refused write was not applied")
			t.Logf("the paused writer's call was refused (%s) %s after the start, and wrote nothing", code, time.Since(began))
		default:
			t.Logf("the paused writer's call ended %s %s after the start: %v", code, time.Since(began), r.err)
		}
		op = rec.Invoke(chaosClients+1, imgs[k], chaos.RegisterOp{Kind: chaos.Read})
		rep, err := service.Call[api.ImageReply](ctx, admin, api.GetImage{UUID: imgs[k]})
		require.NoError(t, err)
		rec.Return(op, chaos.RegisterOutput{Value: rep.Image.Name})
		g.open()
		cc.c.ResumeHeartbeat(paused)
		cc.c.WaitFor(t, 2*time.Second, "the paused node rejoined", func() bool { return slices.Contains(cc.c.LiveUUIDs(), paused) })
		cc.c.WaitConverged(t, 2*time.Second)
		pause()

		stopClients()
		wg.Wait()
		// A last read of each image, after everything settled.
		for k, img := range imgs {
			op := rec.Invoke(chaosClients, img, chaos.RegisterOp{Kind: chaos.Read})
			rep, err := service.Call[api.ImageReply](ctx, admin, api.GetImage{UUID: img})
			require.NoError(t, err, "the last read of image %d", k)
			rec.Return(op, chaos.RegisterOutput{Value: rep.Image.Name})
		}
		virtual = time.Since(began)
	})

	t.Logf("%d calls in %s of virtual time; outcomes %v: %s", rec.Len(), virtual.Round(time.Millisecond), rec.Counts(), out)
	assert.Zero(t, rec.Overdue(0), "calls that ended after their deadline: in virtual time a call returns by it")
	for k, img := range imgs {
		t.Logf("image %d (%s): %d operations in its history", k, img[:8], len(rec.Operations(img)))
	}
	model := chaos.Register(chaosInitName)
	began := time.Now()
	report, err := chaos.Check(model, rec, chaosCheckLimit, t.ArtifactDir())
	require.NoError(t, err)
	t.Logf("porcupine in %s: %s", time.Since(began).Round(time.Microsecond), report)
	require.Equal(t, chaosImages, report.Keys)
	require.True(t, report.OK(), "each image's history of names must be linearizable (inconclusive: porcupine's limit %s was too short): %s", chaosCheckLimit, report)

	t.Run("StaleReadIsCaught", func(t *testing.T) {
		// The check can fail: a read appended after everything that
		// returns a name overwritten by a later acknowledged write must
		// make the recorded history illegal.
		ops := rec.Operations(imgs[0])
		var end int64
		for _, op := range ops {
			end = max(end, op.Return)
		}
		acked := func(o porcupine.Operation) bool {
			return o.Input.(chaos.RegisterOp).Kind == chaos.Write && !o.Output.(chaos.Result).Unknown
		}
		var stale string
		for _, a := range ops {
			if !acked(a) {
				continue
			}
			for _, b := range ops {
				if acked(b) && b.Call > a.Return {
					stale = a.Input.(chaos.RegisterOp).Value
				}
			}
			if stale != "" {
				break
			}
		}
		require.NotEmpty(t, stale, "the history has two acknowledged writes one after the other")
		ops = append(ops, porcupine.Operation{ClientId: chaosClients, Input: chaos.RegisterOp{Kind: chaos.Read},
			Output: chaos.Result{Value: chaos.RegisterOutput{Value: stale}}, Call: end + 1, Return: end + 2})
		require.Equal(t, porcupine.Illegal, porcupine.CheckOperationsTimeout(model, ops, chaosCheckLimit),
			"a read of %q, overwritten by a later acknowledged write, after everything", stale)
	})
}

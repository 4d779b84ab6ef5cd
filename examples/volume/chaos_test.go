package volume_test

import (
	"context"
	"flag"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/examples/volume"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
	"github.com/cloudbus-go/cloudbus/service/servicetest/chaos"
)

var chaosSeed = flag.Uint64("chaos.seed", 0, "TestChaos's seed: the nemesis's schedule and the clients' choices (0: from the clock)")

// attachment is a volume as the chaos check models it: its VM and its
// version, which every attach and detach raises by one.
type attachment struct {
	VM      string
	Version int64
}

// volumeOp is an operation on a volume: attach VM, detach, or read.
type volumeOp struct {
	Kind string // "attach", "detach", "get"
	VM   string // attach's, unique per attach
}

// refused is what the model returns for an operation the service must
// refuse (attach while attached, detach while detached): no reply that
// came back can equal it, since those are left out as failed.
var refused = attachment{Version: -1}

// volumeModel is the volume's sequential specification.
var volumeModel = chaos.Model(attachment{Version: 1}, func(s attachment, op volumeOp) (attachment, attachment) {
	switch {
	case op.Kind == "attach" && s.VM == "":
		next := attachment{VM: op.VM, Version: s.Version + 1}
		return next, next
	case op.Kind == "detach" && s.VM != "":
		next := attachment{Version: s.Version + 1}
		return next, next
	case op.Kind == "get":
		return s, s
	}
	return s, refused
})

// TestChaos: the volume service on five nodes on SQLite, eight clients
// attaching, detaching and reading four volumes through api.portal while
// a nemesis injects every fault kind (kill, stop, stop-heartbeat,
// partition, drop, pause, store-outage, clock-offset): each volume's
// history is linearizable, and the audit of its events table counts no
// write lost, doubled or applied though refused. It prints the faults by
// kind and the operations by outcome.
func TestChaos(t *testing.T) {
	ops := 10_000
	if raceEnabled {
		ops = 1_500
	}
	reg := message.NewRegistry()
	require.NoError(t, volume.Register(reg))
	var latest atomic.Pointer[nodekit.Env] // the last node started is live at the end: the nemesis replaces the nodes it stops
	c := servicetest.Start(t, servicetest.Options{Nodes: 5, Database: "sqlite", Schema: &volume.Schema, Registry: reg,
		Services: func(_ int, env nodekit.Env) []service.Service {
			latest.Store(&env)
			return []service.Service{volume.New(env)}
		}})
	cl := c.Client(t)
	vols := make([]string, 4)
	for i := range vols {
		v, err := service.Call[volume.Volume](t.Context(), cl, volume.CreateVolume{Name: "chaos", SizeGB: 1})
		require.NoError(t, err)
		vols[i] = v.UUID
	}

	start := time.Now()
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(start.UnixNano())
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	nem := &chaos.Nemesis{Cluster: c, Seed: seed, Every: 500 * time.Millisecond, Hold: 1500 * time.Millisecond, Logf: t.Logf}
	nemesis := make(chan chaos.NemesisReport, 1)
	go func() { // faults at random, from the seed, until stop
		rep, err := nem.Run(ctx)
		assert.NoError(t, err, "the nemesis ends every fault")
		nemesis <- rep
	}()
	rec := chaos.NewRecorder(nil)
	var issued atomic.Int64
	var wg sync.WaitGroup
	for client := range 8 {
		rng := rand.New(rand.NewPCG(seed, uint64(client)))
		wg.Go(func() {
			for issued.Add(1) <= int64(ops) || !nem.Report().Covered(nil) { // and until every fault kind came
				time.Sleep(time.Duration(rng.IntN(6)) * time.Millisecond) // spread the calls over the faults
				vol := vols[rng.IntN(len(vols))]
				in, msg := volumeOp{Kind: "get"}, any(volume.GetVolume{Volume: vol})
				switch rng.IntN(3) {
				case 0:
					in = volumeOp{Kind: "attach", VM: message.NewUUID()}
					msg = volume.AttachVolume{Volume: vol, VM: in.VM}
				case 1:
					in, msg = volumeOp{Kind: "detach"}, volume.DetachVolume{Volume: vol}
				}
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				deadline, _ := cctx.Deadline()
				op := rec.Invoke(client, vol, in) // then send it under the operation's id
				v, err := service.Call[volume.Volume](cctx, cl, msg, bus.WithID(rec.ID(op)))
				cancel()
				if rec.End(op, attachment{VM: v.AttachedTo, Version: v.Version}, err, deadline) == chaos.Unknown {
					time.Sleep(20 * time.Millisecond) // back off while the cluster heals
				}
			}
		})
	}
	wg.Wait()
	stop()
	nrep := <-nemesis
	rep, err := chaos.Check(volumeModel, rec, 30*time.Second, t.TempDir()) // porcupine, per volume
	require.NoError(t, err)
	events, err := volume.NewRepo(*latest.Load()).Events(t.Context()) // the end-state read: a row per write applied
	require.NoError(t, err)
	for id, n := range events {
		for range n {
			rec.Commit(id, "", time.Time{}) // the table does not say when
		}
	}
	audit := rec.Audit(time.Second, func(in, _ any) bool { return in.(volumeOp).Kind != "get" })
	t.Logf("%d operations in %s: %v, %d ended over 50 ms after their deadline; nemesis %s; %s; audit: %s", rec.Len(), time.Since(start).Round(time.Millisecond), rec.Counts(), rec.Overdue(50*time.Millisecond), nrep, rep, audit)
	assert.True(t, rep.OK(), "every volume's history is linearizable (-chaos.seed=%d repeats the schedule): %s", seed, rep)
	assert.True(t, audit.OK(), "every count 0 (-chaos.seed=%d repeats the schedule): %s", seed, audit)
	assert.Positive(t, rec.Counts()[chaos.OK], "operations succeed between the faults")
	assert.Positive(t, audit.Commits, "the events table holds the writes applied")
	assert.True(t, nrep.Covered(nil), "every fault kind injected: %s", nrep)
}

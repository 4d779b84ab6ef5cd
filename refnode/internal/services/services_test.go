package services_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/memdb"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
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

const pingInterval = 100 * time.Millisecond

// fixture is a test cluster running refnode's services over one shared
// store and simulated hypervisor.
type fixture struct {
	c   *servicetest.Cluster
	db  *memdb.Store
	hv  *simhv.Hypervisor
	cl  *service.Client
	mu  sync.Mutex
	set map[int]*services.Set // by node start index
}

func start(t *testing.T, nodes int, hv simhv.Config) *fixture {
	t.Helper()
	return startWith(t, nodes, hv, nil)
}

// startWith is start with the services' store wrapped by wrap (nil: the
// shared memdb store itself), for tests that inject store failures.
func startWith(t *testing.T, nodes int, hv simhv.Config, wrap func(cloud.Store) cloud.Store) *fixture {
	t.Helper()
	reg := message.NewRegistry()
	require.NoError(t, api.Register(reg))
	h, err := simhv.New(hv)
	require.NoError(t, err)
	f := &fixture{db: memdb.New(), hv: h, set: map[int]*services.Set{}}
	var store cloud.Store = f.db
	if wrap != nil {
		store = wrap(f.db)
	}
	f.c = servicetest.Start(t, servicetest.Options{
		Nodes:    nodes,
		Registry: reg,
		Services: func(i int, _ nodekit.Env) []service.Service {
			s, err := services.New(services.Config{Store: store, Hypervisor: f.hv, PingInterval: pingInterval})
			if err != nil {
				panic(err)
			}
			f.mu.Lock()
			f.set[i] = s
			f.mu.Unlock()
			return s.Services()
		},
	})
	f.db.UseFence(f.c.Store(), memfence.Config{}) // claims hold while the nodes' records in the cluster's store are live
	f.cl = f.c.Client(t)
	return f
}

// setOf returns the services of the node with the given UUID.
func (f *fixture) setOf(t *testing.T, node string) *services.Set {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.set {
		if f.c.Node(i).UUID() == node {
			return s
		}
	}
	t.Fatalf("no node %s", node)
	return nil
}

func (f *fixture) addHosts(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		id := message.NewUUID()
		rep, err := service.Call[api.HostReply](t.Context(), f.cl, api.AddHost{UUID: id, Address: "10.0.0.1"})
		require.NoError(t, err)
		assert.Equal(t, f.c.Owner(id), rep.Node, "AddHost is handled by the host's owner")
		assert.Equal(t, cloud.HostConnected, rep.Host.Status)
		assert.Equal(t, rep.Node, rep.Host.ManagedBy)
		ids = append(ids, id)
	}
	return ids
}

func (f *fixture) addImage(t *testing.T) string {
	t.Helper()
	id := message.NewUUID()
	rep, err := service.Call[api.ImageReply](t.Context(), f.cl, api.AddImage{UUID: id, Name: "img"})
	require.NoError(t, err)
	assert.Equal(t, f.c.Owner(id), rep.Node)
	return id
}

func TestVMLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 3, simhv.Config{Latency: 10 * time.Millisecond})
		ctx := t.Context()
		f.addHosts(t, 2)
		img := f.addImage(t)

		created, err := service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{ImageUUID: img, Name: "web"})
		require.NoError(t, err)
		vm := created.VM.UUID
		assert.Equal(t, created.Portal, created.Node, "a creation through api.portal runs on the portal's node")
		assert.Equal(t, created.Node, created.AllocatedBy, "the creating node's own host service allocates")
		assert.Equal(t, cloud.VMCreated, created.VM.State)
		assert.Equal(t, 1, created.VM.CPUs)

		steps := []struct {
			msg   any
			state cloud.VMState
			power simhv.Power
		}{
			{api.StartVm{UUID: vm}, cloud.VMRunning, simhv.PowerOn},
			{api.RebootVm{UUID: vm}, cloud.VMRunning, simhv.PowerOn},
			{api.StopVm{UUID: vm}, cloud.VMStopped, simhv.PowerOff},
			{api.StartVm{UUID: vm}, cloud.VMRunning, simhv.PowerOn},
		}
		for _, s := range steps {
			rep, err := service.Call[api.VmReply](ctx, f.cl, s.msg)
			require.NoError(t, err, "%T", s.msg)
			assert.Equal(t, f.c.Owner(vm), rep.Node, "%T is handled by the VM's owner", s.msg)
			assert.NotEmpty(t, rep.Portal)
			assert.Equal(t, s.state, rep.VM.State)
			p, ok := f.hv.PowerOf(vm)
			assert.True(t, ok)
			assert.Equal(t, s.power, p)
		}
		// The same, sent by a node: routed by the ring, no portal.
		rep, err := service.Call[api.VmReply](ctx, f.c.Node(0), api.GetVm{UUID: vm})
		require.NoError(t, err)
		assert.Equal(t, f.c.Owner(vm), rep.Node)
		assert.Empty(t, rep.Portal)

		again, err := service.Call[api.VmReply](ctx, f.cl, api.StartVm{UUID: vm})
		require.NoError(t, err, "a start of a running VM succeeds")
		assert.Equal(t, cloud.VMRunning, again.VM.State)
		p, _ := f.hv.PowerOf(vm)
		assert.Equal(t, simhv.PowerOn, p)
		created, err = service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{ImageUUID: img, Name: "never started"})
		require.NoError(t, err)
		_, err = service.Call[api.VmReply](ctx, f.cl, api.RebootVm{UUID: created.VM.UUID})
		assert.ErrorIs(t, err, message.ErrConflict, "rebooting a VM never started is not a valid transition")
		assert.Contains(t, err.Error(), "cannot reboot a VM that is created")

		rep, err = service.Call[api.VmReply](ctx, f.cl, api.DestroyVm{UUID: vm})
		require.NoError(t, err)
		assert.Equal(t, cloud.VMDestroyed, rep.VM.State)
		_, ok := f.hv.PowerOf(vm)
		assert.False(t, ok, "destroyed on the hypervisor")
		for _, msg := range []any{api.StartVm{UUID: vm}, api.StopVm{UUID: vm}, api.RebootVm{UUID: vm}, api.DestroyVm{UUID: vm}} {
			_, err = service.Call[api.VmReply](ctx, f.cl, msg)
			assert.ErrorIs(t, err, message.ErrConflict, "%T on a destroyed VM", msg)
		}

		_, err = service.Call[api.VmReply](ctx, f.cl, api.StartVm{UUID: message.NewUUID()})
		assert.ErrorIs(t, err, message.ErrNotFound)
	})
}

// TestVMRefusalRecorded: an operation the VM's state refuses is
// recorded with its message like a reply: the same message again (a
// redelivery, a portal's retry, a message moved from a dead node's
// queue) gets the same refusal once the state would allow it, and does
// not run; a successful operation's reply is recorded as before.
func TestVMRefusalRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 3, simhv.Config{})
		ctx := t.Context()
		f.addHosts(t, 1)
		created, err := service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{ImageUUID: f.addImage(t), Name: "web"})
		require.NoError(t, err)
		vm := created.VM.UUID

		id := message.NewUUID()
		_, err = service.Call[api.VmReply](ctx, f.cl, api.RebootVm{UUID: vm}, bus.WithID(id))
		require.ErrorIs(t, err, message.ErrConflict, "rebooting a VM never started")
		started, err := service.Call[api.VmReply](ctx, f.cl, api.StartVm{UUID: vm})
		require.NoError(t, err)
		_, err = service.Call[api.VmReply](ctx, f.cl, api.RebootVm{UUID: vm}, bus.WithID(id))
		require.ErrorIs(t, err, message.ErrConflict, "the same message again: its recorded refusal, though the VM runs now")
		assert.Contains(t, err.Error(), "cannot reboot a VM that is created")
		got, err := service.Call[api.VmReply](ctx, f.cl, api.GetVm{UUID: vm})
		require.NoError(t, err)
		assert.Equal(t, cloud.VMRunning, got.VM.State)
		assert.Equal(t, started.VM.Version, got.VM.Version, "the copy did not run")
		assert.Zero(t, f.hv.Calls(simhv.OpRebootVM), "nor did the hypervisor")

		_, err = service.Call[api.VmReply](ctx, f.cl, api.StopVm{UUID: vm})
		require.NoError(t, err)

		again := message.NewUUID()
		first, err := service.Call[api.VmReply](ctx, f.cl, api.StartVm{UUID: vm}, bus.WithID(again))
		require.NoError(t, err)
		second, err := service.Call[api.VmReply](ctx, f.cl, api.StartVm{UUID: vm}, bus.WithID(again))
		require.NoError(t, err, "a reply is recorded as before")
		assert.Equal(t, first.VM, second.VM)
	})
}

func TestBadRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 2, simhv.Config{})
		ctx := t.Context()
		img := f.addImage(t)

		_, err := service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{ImageUUID: img})
		assert.ErrorIs(t, err, message.ErrNotFound, "no host to place the VM on")
		assert.Contains(t, err.Error(), "add one with AddHost")

		hosts := f.addHosts(t, 1)
		_, err = service.Call[api.HostReply](ctx, f.cl, api.AddHost{UUID: hosts[0]})
		assert.ErrorIs(t, err, message.ErrAlreadyExists, "adding a host twice")
		_, err = service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{ImageUUID: message.NewUUID()})
		assert.ErrorIs(t, err, message.ErrNotFound, "unknown image")
		_, err = service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{ImageUUID: "nope"})
		assert.ErrorIs(t, err, message.ErrInvalidUUID)

		created, err := service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{ImageUUID: img})
		require.NoError(t, err)
		_, err = service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{UUID: created.VM.UUID, ImageUUID: img})
		assert.ErrorIs(t, err, message.ErrAlreadyExists, "a VM UUID cannot be created twice")

		// A routed message naming no resource, or sent with another
		// resource, never runs on a node that may not own it.
		_, err = service.Call[any](ctx, f.cl, api.StartVm{})
		assert.ErrorIs(t, err, message.ErrBadRequest)
		assert.Contains(t, err.Error(), "StartVm")
		_, err = service.Call[any](ctx, f.cl, api.GetHost{UUID: hosts[0]}, bus.WithResource(message.NewUUID()))
		assert.ErrorIs(t, err, message.ErrBadRequest)
	})
}

func TestHypervisorFailureAndSlowness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 2, simhv.Config{Latency: 20 * time.Millisecond})
		ctx := t.Context()
		f.addHosts(t, 1)
		img := f.addImage(t)
		created, err := service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{ImageUUID: img})
		require.NoError(t, err)
		vm := created.VM.UUID

		f.hv.FailNext(simhv.OpStartVM, 1)
		_, err = service.Call[api.VmReply](ctx, f.cl, api.StartVm{UUID: vm})
		assert.ErrorIs(t, err, message.ErrInternal, "a hypervisor failure crosses the bus as internal: outcome unknown")
		assert.Contains(t, err.Error(), "the VM stays created")
		rep, err := service.Call[api.VmReply](ctx, f.cl, api.GetVm{UUID: vm})
		require.NoError(t, err)
		assert.Equal(t, cloud.VMCreated, rep.VM.State, "the state is restored")

		rep, err = service.Call[api.VmReply](ctx, f.cl, api.StartVm{UUID: vm})
		require.NoError(t, err, "the next start succeeds")
		assert.Equal(t, cloud.VMRunning, rep.VM.State)

		// A hypervisor slower than the caller's deadline: the caller times
		// out, and the owner restores the state when the handler's ctx ends.
		f.hv.SetLatency(simhv.OpStopVM, time.Minute)
		began := time.Now()
		_, err = service.Call[api.VmReply](ctx, f.cl, api.StopVm{UUID: vm}, bus.WithTimeout(time.Second))
		assert.ErrorIs(t, err, message.ErrTimeout)
		assert.Less(t, time.Since(began), 2*time.Second)
		f.c.WaitFor(t, 5*time.Second, "the VM is running again", func() bool {
			v, err := f.db.VM(ctx, vm)
			return err == nil && v.State == cloud.VMRunning
		})
	})
}

// TestHostTakeoverAfterKill is the design's takeover: a node dies without
// a goodbye; once it is evicted, every host it owned is reconnected by
// its new ring owner, counted and logged, and tracked by it.
func TestHostTakeoverAfterKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 3, simhv.Config{Latency: 5 * time.Millisecond})
		ctx := t.Context()
		hosts := f.addHosts(t, 12)
		f.waitTracking(t)

		victim := f.c.Owner(hosts[0])
		var theirs []string
		for _, h := range hosts {
			if f.c.Owner(h) == victim {
				theirs = append(theirs, h)
			}
		}
		f.c.Kill(victim)
		f.c.WaitGone(t, victim, 2*time.Second)
		f.c.WaitConverged(t, time.Second)
		f.c.WaitFor(t, 2*time.Second, "every host of the dead node reconnected by its new owner", func() bool {
			for _, h := range theirs {
				rec, err := f.db.Host(ctx, h)
				if err != nil || rec.ManagedBy != f.c.Owner(h) || rec.Status != cloud.HostConnected {
					return false
				}
			}
			return true
		})
		var takeovers uint64
		for _, n := range f.c.Live() {
			takeovers += f.setOf(t, n.UUID()).Host.Stats().Takeovers
		}
		assert.Equal(t, uint64(len(theirs)), takeovers, "each taken-over host is counted once")
		for _, h := range theirs {
			rec, _ := f.db.Host(ctx, h)
			assert.Equal(t, 1, rec.Takeovers)
			assert.NotEqual(t, victim, rec.ManagedBy)
		}
		f.waitTracking(t)
	})
}

// TestJoinMovesTracking: a node that joins takes the hosts it now owns
// over, and their old owners stop tracking them.
func TestJoinMovesTracking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 2, simhv.Config{})
		hosts := f.addHosts(t, 20)
		f.waitTracking(t)
		newcomer := f.c.AddNode(t)
		f.c.WaitConverged(t, time.Second)
		f.waitTracking(t)
		moved := 0
		for _, h := range hosts {
			if f.c.Owner(h) == newcomer.UUID() {
				moved++
				rec, err := f.db.Host(t.Context(), h)
				require.NoError(t, err)
				assert.Equal(t, newcomer.UUID(), rec.ManagedBy)
			}
		}
		assert.Positive(t, moved, "the newcomer owns some of 20 hosts")
	})
}

// waitTracking waits until every live node tracks exactly the hosts it
// owns.
func (f *fixture) waitTracking(t *testing.T) {
	t.Helper()
	f.c.WaitFor(t, 2*time.Second, "every live node tracks exactly the hosts it owns", func() bool {
		hosts, _ := f.db.Hosts(t.Context())
		for _, n := range f.c.Live() {
			var want []string
			for _, h := range hosts {
				if n.Owns(h.UUID) {
					want = append(want, h.UUID)
				}
			}
			got := f.setOf(t, n.UUID()).Host.Tracked()
			if len(got) != len(want) {
				return false
			}
			for i := range got {
				if got[i] != want[i] {
					return false
				}
			}
		}
		return true
	})
}

func TestPingDisconnectsAndReconnects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 2, simhv.Config{})
		ctx := t.Context()
		h := f.addHosts(t, 1)[0]
		status := func(want cloud.HostStatus) func() bool {
			return func() bool {
				rec, err := f.db.Host(ctx, h)
				return err == nil && rec.Status == want
			}
		}
		f.hv.SetHostDown(h, true)
		f.c.WaitFor(t, 5*pingInterval, "the host is marked disconnected", status(cloud.HostDisconnected))
		f.hv.SetHostDown(h, false)
		f.c.WaitFor(t, 5*pingInterval, "the host is reconnected", status(cloud.HostConnected))
		st := f.setOf(t, f.c.Owner(h)).Host.Stats()
		assert.Positive(t, st.PingFailures)
		assert.Positive(t, st.Reconnects)
		assert.Zero(t, st.Takeovers)

		rep, err := service.Call[api.HostReply](ctx, f.cl, api.ReconnectHost{UUID: h})
		require.NoError(t, err)
		assert.Equal(t, f.c.Owner(h), rep.Node)
		assert.Equal(t, cloud.HostConnected, rep.Host.Status)
	})
}

// TestAllocateHostIsLocal: CreateVm sent to a node runs there, and that
// node's host service picks the least loaded connected host.
func TestAllocateHostIsLocal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 3, simhv.Config{})
		ctx := t.Context()
		hosts := f.addHosts(t, 2)
		img := f.addImage(t)
		perHost := map[string]int{}
		for i := range 4 {
			n := f.c.Node(i % 3)
			rep, err := service.Call[api.VmCreated](ctx, n, api.CreateVm{ImageUUID: img})
			require.NoError(t, err)
			assert.Equal(t, n.UUID(), rep.Node, "a creation runs on the local node")
			assert.Equal(t, n.UUID(), rep.AllocatedBy)
			assert.Empty(t, rep.Portal)
			perHost[rep.VM.HostUUID]++
		}
		assert.Equal(t, map[string]int{hosts[0]: 2, hosts[1]: 2}, perHost)
	})
}

func TestConfigAndLifecycle(t *testing.T) {
	_, err := services.New(services.Config{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Store is required")
	assert.Contains(t, err.Error(), "Hypervisor is required")

	hv, err := simhv.New(simhv.Config{})
	require.NoError(t, err)
	s, err := services.New(services.Config{Store: memdb.New(), Hypervisor: hv})
	require.NoError(t, err)
	assert.NoError(t, s.Host.Stop(context.Background()), "Stop without Start")
	assert.NoError(t, s.Host.Stop(context.Background()), "Stop is idempotent")
	names := []string{}
	for _, svc := range s.Services() {
		names = append(names, svc.Name())
	}
	assert.Equal(t, []string{"host", "image", "vmInstance"}, names)
}

// TestVMSweepRepairs: a VM record left transitional, or contradicting its
// hypervisor, is driven to the stable state the hypervisor reports by the
// VM's owner within one sweep interval, and at once by the new owner
// when the owner dies; each repair is counted.
func TestVMSweepRepairs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 3, simhv.Config{})
		ctx := t.Context()
		f.addHosts(t, 2)
		img := f.addImage(t)
		created, err := service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{ImageUUID: img, Name: "swept"})
		require.NoError(t, err)
		vm, host := created.VM.UUID, created.VM.HostUUID
		_, err = service.Call[api.VmReply](ctx, f.cl, api.StartVm{UUID: vm})
		require.NoError(t, err)
		owner := f.c.Owner(vm)
		repairs := func(node string) uint64 { return f.setOf(t, node).VM.Stats().Repairs }
		before := repairs(owner)
		state := func() cloud.VMState {
			v, err := f.db.VM(ctx, vm)
			require.NoError(t, err)
			return v.State
		}
		set := func(st cloud.VMState) {
			_, err := f.db.UpdateVM(ctx, vm, func(v *cloud.VM) error { v.State = st; return nil })
			require.NoError(t, err)
		}
		const sweep = 30 * time.Second // services.Config.VMSweepInterval's default

		// Left transitional while the VM runs.
		set(cloud.VMStarting)
		f.c.WaitFor(t, sweep+time.Second, "the owner repairs a VM left starting", func() bool {
			return state() == cloud.VMRunning && repairs(owner) > before // counted after the commit
		})
		assert.Equal(t, before+1, repairs(owner))

		// The hypervisor stopped it behind the records' back.
		require.NoError(t, f.hv.StopVM(ctx, host, vm))
		f.c.WaitFor(t, sweep+time.Second, "the owner records the stop the hypervisor reports", func() bool {
			return state() == cloud.VMStopped && repairs(owner) > before+1
		})
		assert.Equal(t, before+2, repairs(owner))

		// The owner dies with the VM recorded as stopping: the new owner
		// repairs it at the takeover, long before its next sweep.
		set(cloud.VMStopping)
		f.c.Kill(owner)
		f.c.WaitGone(t, owner, 2*time.Second)
		f.c.WaitConverged(t, time.Second)
		start := time.Now()
		f.c.WaitFor(t, 2*time.Second, "the new owner repairs the VM at the takeover", func() bool {
			return state() == cloud.VMStopped && repairs(f.c.Owner(vm)) > 0
		})
		assert.Less(t, time.Since(start), sweep, "repaired at the ring change, not at the next sweep")
		assert.Equal(t, uint64(1), repairs(f.c.Owner(vm)))
	})
}

// cutStore fails every VM update made in a transaction while cut is set,
// as a database cut during the final write would.
type cutStore struct {
	cloud.Store
	cut *atomic.Bool
}

func (s cutStore) Do(ctx context.Context, w fence.Guard, fn func(ctx context.Context, tx cloud.Store) ([]byte, error)) ([]byte, error) {
	return s.Store.Do(ctx, w, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		return fn(ctx, cutStore{Store: tx, cut: s.cut})
	})
}

func (s cutStore) UpdateVM(ctx context.Context, uuid string, update func(*cloud.VM) error) (cloud.VM, error) {
	if s.cut.Load() {
		return cloud.VM{}, errors.New("test: the database link is cut")
	}
	return s.Store.UpdateVM(ctx, uuid, update)
}

// TestVMJournalRepairs: with simulators that cannot tell a VM's power
// (simhv Adopt, one per process), a VM operation whose final write fails
// after the hypervisor acted is recorded by the owner's next sweep, from
// what the owner saw the hypervisor do: nothing wrote the VM since, so
// the journal entry's base is still the record's version.
func TestVMJournalRepairs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hv, err := simhv.New(simhv.Config{Adopt: true})
		require.NoError(t, err)
		db := memdb.New()
		logs := &logBuffer{}
		var cut atomic.Bool
		const sweep = 2 * time.Second
		c, set := startServices(t, 3, func(int) services.Config {
			return services.Config{Store: cutStore{Store: db, cut: &cut}, Hypervisor: hv, PingInterval: pingInterval, VMSweepInterval: sweep,
				StallVMFinalWrite: func(context.Context, string) { cut.Store(true) }, Logger: slog.New(slog.NewTextHandler(logs, nil))}
		})
		db.UseFence(c.Store(), memfence.Config{})
		cl := c.Client(t)
		ctx := t.Context()
		vm := addVM(t, ctx, cl)

		// The first StartVm's final write fails (the stall hook cuts the
		// store once the hypervisor started the VM).
		_, err = service.Call[api.VmReply](ctx, cl, api.StartVm{UUID: vm})
		require.Error(t, err)
		got, err := db.VM(ctx, vm)
		require.NoError(t, err)
		require.Equal(t, cloud.VMCreated, got.State, "the failed transaction wrote nothing")
		cut.Store(false) // healed
		healed := time.Now()
		c.WaitFor(t, sweep+time.Second, "the owner records what it saw the hypervisor do", func() bool {
			v, err := db.VM(ctx, vm)
			return err == nil && v.State == cloud.VMRunning && len(logs.lines("vm state repaired from the hypervisor", "vm="+vm)) > 0 // logged after the commit
		})
		t.Logf("recorded %s after the heal (virtual time; sweep every %s)", time.Since(healed), sweep)
		var total services.VMStats
		for i := range 3 {
			st := set(i).VM.Stats()
			total.Repairs += st.Repairs
			total.Journaled += st.Journaled
			total.StaleJournal += st.StaleJournal
		}
		assert.Equal(t, uint64(1), total.Repairs)
		assert.Zero(t, total.Journaled, "the entry applied is gone")
		assert.Zero(t, total.StaleJournal, "nothing wrote the VM since the failed write: the entry was current")
		got, err = db.VM(ctx, vm)
		require.NoError(t, err)
		assert.Equal(t, int64(2), got.Version, "the repair is the VM's second write")
		repaired := logs.lines("vm state repaired from the hypervisor", "vm="+vm)
		require.Len(t, repaired, 1)
		for _, attr := range []string{"from=created", "to=running", "power=unknown", "source=journal", "base=1", "version=2"} {
			assert.Contains(t, repaired[0], attr)
		}
	})
}

// TestDomainLimits: a message outside the domain limits is answered
// bad_request naming the field, through api.portal, and changes nothing.
func TestDomainLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 2, simhv.Config{})
		ctx := t.Context()
		f.addHosts(t, 1)
		img := f.addImage(t)
		for _, c := range []struct {
			msg   any
			field string
		}{
			{api.CreateVm{ImageUUID: img, CPUs: -1}, "cpus"},
			{api.CreateVm{ImageUUID: img, MemoryMB: 99999999999999}, "memory_mb"},
			{api.AddImage{UUID: message.NewUUID(), SizeMB: -5}, "size_mb"},
			{api.AddHost{UUID: message.NewUUID(), Name: strings.Repeat("h", 10*1024)}, "name"},
		} {
			_, err := service.Call[any](ctx, f.cl, c.msg)
			require.ErrorIs(t, err, message.ErrBadRequest, "%T", c.msg)
			assert.Contains(t, err.Error(), c.field)
		}
		vms, err := f.db.VMs(ctx)
		require.NoError(t, err)
		assert.Empty(t, vms)
	})
}

// addVM adds a host, an image and a VM on it through cl's api.portal and
// returns the VM's UUID.
// startServices starts a cluster of n nodes, node i running the services
// cfg(i) configures, with the API's messages registered. It returns the
// cluster and node i's services.Set.
func startServices(t *testing.T, n int, cfg func(i int) services.Config) (*servicetest.Cluster, func(i int) *services.Set) {
	t.Helper()
	reg := message.NewRegistry()
	require.NoError(t, api.Register(reg))
	var mu sync.Mutex
	sets := map[int]*services.Set{} // by node index; a node started again replaces its entry
	c := servicetest.Start(t, servicetest.Options{Nodes: n, Registry: reg, Services: func(i int, _ nodekit.Env) []service.Service {
		s, err := services.New(cfg(i))
		if err != nil {
			panic(err)
		}
		mu.Lock()
		sets[i] = s
		mu.Unlock()
		return s.Services()
	}})
	return c, func(i int) *services.Set {
		mu.Lock()
		defer mu.Unlock()
		return sets[i]
	}
}

func addVM(t *testing.T, ctx context.Context, cl *service.Client) string {
	t.Helper()
	_, err := service.Call[api.HostReply](ctx, cl, api.AddHost{UUID: message.NewUUID(), Address: "10.0.0.1"})
	require.NoError(t, err)
	img := message.NewUUID()
	_, err = service.Call[api.ImageReply](ctx, cl, api.AddImage{UUID: img, Name: "img"})
	require.NoError(t, err)
	created, err := service.Call[api.VmCreated](ctx, cl, api.CreateVm{ImageUUID: img})
	require.NoError(t, err)
	return created.VM.UUID
}

// deadStore is a node's view of the store: once dead is set (the node
// was killed) nothing it writes commits, as a database that can no
// longer reach the process.
type deadStore struct {
	cloud.Store
	dead *atomic.Bool
}

func (s deadStore) Do(ctx context.Context, w fence.Guard, fn func(ctx context.Context, tx cloud.Store) ([]byte, error)) ([]byte, error) {
	return s.Store.Do(ctx, w, func(ctx context.Context, tx cloud.Store) ([]byte, error) {
		out, err := fn(ctx, tx)
		if err == nil && s.dead.Load() {
			err = errors.New("test: the node is dead; its transaction does not commit")
		}
		return out, err
	})
}

// TestOperationRepeatedAfterItsOwnerDied: a VM's owner dies after the
// hypervisor started (then stopped, then destroyed) the VM and before
// the record followed; the portal resends the message to the new owner
// (WithRetry), whose takeover sweep records the power state the dead
// owner left, before or after the copy runs. The copy finds the VM in
// the state it asks for (or, for the destroy, gone from its host) and
// is answered as done, not refused or failed: the VM is so because of
// it. The same message repeated later (a REST client's retry under the
// same Idempotency-Key) gets that answer again.
func TestOperationRepeatedAfterItsOwnerDied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hv, err := simhv.New(simhv.Config{})
		require.NoError(t, err)
		db := memdb.New()
		var (
			c      *servicetest.Cluster
			target atomic.Value // the VM whose next final write kills its owner
			killed atomic.Int32
			dead   [4]atomic.Bool
		)
		target.Store("")
		c, _ = startServices(t, 4, func(i int) services.Config {
			return services.Config{Store: deadStore{Store: db, dead: &dead[i]}, Hypervisor: hv, PingInterval: pingInterval,
				StallVMFinalWrite: func(ctx context.Context, vm string) {
					if target.CompareAndSwap(vm, "") { // the hypervisor acted: the owner dies before its write
						dead[i].Store(true)
						c.Kill(c.Node(i).UUID())
						killed.Add(1)
					}
				}}
		})
		db.UseFence(c.Store(), memfence.Config{})
		cl := c.Client(t)
		ctx := t.Context()
		vm := addVM(t, ctx, cl)

		for _, s := range []struct {
			msg   any
			state cloud.VMState
			power simhv.Power
		}{
			{api.StartVm{UUID: vm}, cloud.VMRunning, simhv.PowerOn},
			{api.StopVm{UUID: vm}, cloud.VMStopped, simhv.PowerOff},
			{api.DestroyVm{UUID: vm}, cloud.VMDestroyed, ""},
		} {
			owner := c.Owner(vm)
			before := killed.Load()
			target.Store(vm)
			id := message.NewUUID()
			rep, err := service.Call[api.VmReply](ctx, cl, s.msg, bus.WithID(id), bus.WithRetry(3))
			require.NoError(t, err, "%T, resent after its owner died", s.msg)
			require.Equal(t, before+1, killed.Load(), "%T: the owner died after the hypervisor acted", s.msg)
			assert.NotEqual(t, owner, rep.Node, "%T: answered by the new owner", s.msg)
			assert.Equal(t, s.state, rep.VM.State, "%T", s.msg)
			p, _ := hv.PowerOf(vm)
			assert.Equal(t, s.power, p, "%T", s.msg)
			got, err := db.VM(ctx, vm)
			require.NoError(t, err)
			assert.Equal(t, s.state, got.State, "%T: recorded", s.msg)

			again, err := service.Call[api.VmReply](ctx, cl, s.msg, bus.WithID(id), bus.WithRetry(3))
			require.NoError(t, err, "%T: the same message again", s.msg)
			assert.Equal(t, rep.VM, again.VM, "%T: the recorded answer", s.msg)
			c.WaitConverged(t, 5*time.Second)
		}
	})
}

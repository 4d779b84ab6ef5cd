package services_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/chaoscheck"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/memdb"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/servicetest/chaos"
)

// logBuffer collects the services' log lines, from many goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the lines holding every one of words.
func (b *logBuffer) lines(words ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.DeleteFunc(strings.Split(b.buf.String(), "\n"), func(l string) bool {
		return l == "" || slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(l, w) })
	})
}

// finalStall holds the final write of the first VM operation on one VM,
// after its hypervisor call, until released (services.Config.
// StallVMFinalWrite), as a process paused there by SIGSTOP: it does not
// see its deadline meanwhile.
type finalStall struct {
	mu      sync.Mutex
	vm      string        // the VM whose operation stalls, once
	stalled chan struct{} // closed when it stalled
	release chan struct{} // closed to let it go on
}

func (s *finalStall) arm(vm string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vm, s.stalled, s.release = vm, make(chan struct{}), make(chan struct{})
}

// free lets the stalled operation go on; it is idempotent.
func (s *finalStall) free() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vm = ""
	if s.release != nil {
		close(s.release)
		s.release = nil
	}
}

func (s *finalStall) stall(_ context.Context, vm string) {
	s.mu.Lock()
	if s.vm == "" || vm != s.vm {
		s.mu.Unlock()
		return
	}
	s.vm = ""
	stalled, release := s.stalled, s.release
	s.mu.Unlock()
	close(stalled)
	<-release
}

// TestStaleJournalNotApplied is issue 23's lost acknowledged write, in
// one process: simulators that cannot tell a VM's power (simhv Adopt, as
// refnode serve runs them), and node X whose StartVm of its VM stalls
// after the hypervisor started it, before the final write. X is cut off
// the heartbeat store and evicted; through the new owner a client starts
// and stops the VM (both acknowledged: version 3, stopped). X's stalled
// write then fails (the fence refuses it, or its deadline has passed)
// and X journals "running" with the version it had read (1). X rejoins with the same UUID and a new epoch
// and owns the VM again: its sweeps must drop the journal entry (logged,
// counted in VMStats.StaleJournal) and leave the record stopped, and
// the VM's history (the stalled start unknown, allowed to take effect
// until 2 s past its deadline; X resumes after that) must be
// linearizable against cloud.Transition.
func TestStaleJournalNotApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hv, err := simhv.New(simhv.Config{Adopt: true})
		require.NoError(t, err)
		db := memdb.New()
		logs := &logBuffer{}
		st := &finalStall{}
		const sweep = time.Second
		c, set := startServices(t, 3, func(int) services.Config {
			return services.Config{Store: db, Hypervisor: hv, PingInterval: pingInterval, VMSweepInterval: sweep,
				StallVMFinalWrite: st.stall, Logger: slog.New(slog.NewTextHandler(logs, nil))}
		})
		t.Cleanup(st.free) // before the cluster closes, should the test fail while X stalls
		db.UseFence(c.Store(), memfence.Config{MaxAge: heartbeat.TestConfig().EvictAfter})
		setOf := func(node string) *services.Set {
			for i := range 3 {
				if c.Node(i).UUID() == node {
					return set(i)
				}
			}
			t.Fatalf("no node %s", node)
			return nil
		}
		cl := c.Client(t)
		ctx := t.Context()
		_, err = service.Call[api.HostReply](ctx, cl, api.AddHost{UUID: message.NewUUID(), Address: "10.0.0.1"})
		require.NoError(t, err)
		img := message.NewUUID()
		_, err = service.Call[api.ImageReply](ctx, cl, api.AddImage{UUID: img, Name: "img"})
		require.NoError(t, err)
		x := c.Node(0).UUID()
		vm := message.NewUUID()
		for c.Owner(vm) != x {
			vm = message.NewUUID()
		}
		created, err := service.Call[api.VmCreated](ctx, cl, api.CreateVm{UUID: vm, ImageUUID: img})
		require.NoError(t, err)
		require.Equal(t, int64(1), created.VM.Version)

		// The StartVm that X stalls in, after its hypervisor call.
		began := time.Now()
		st.arm(vm)
		hist := chaos.NewRecorder(time.Now) // the VM's history, keyed by its UUID
		// The record, read directly, is a read of the VM.
		read := func() {
			t.Helper()
			i := hist.Invoke(2, vm, chaoscheck.VMInput{})
			rec, err := db.VM(ctx, vm)
			require.NoError(t, err)
			hist.Return(i, chaoscheck.VMOutput{State: rec.State})
		}
		type result struct {
			rep api.VmReply
			err error
		}
		done := make(chan result, 1)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		deadline, _ := sctx.Deadline()
		stalledOp := hist.Invoke(0, vm, chaoscheck.VMInput{Op: cloud.VMOpStart})
		go func() {
			rep, err := service.Call[api.VmReply](sctx, cl, api.StartVm{UUID: vm}, bus.WithTimeout(5*time.Second))
			done <- result{rep, err}
		}()
		<-st.stalled
		p, ok := hv.PowerOf(vm)
		require.True(t, ok, "the simulator knows the VM")
		require.Equal(t, simhv.PowerOn, p, "X's hypervisor started the VM before the stall")

		// X pauses: cut off the heartbeat store, evicted by its peers.
		c.StopHeartbeat(x)
		c.WaitGone(t, x, 2*time.Second)
		c.WaitConverged(t, 2*time.Second)
		owner := c.Owner(vm)
		require.NotEqual(t, x, owner)
		r := <-done
		require.Error(t, r.err, "the stalled StartVm answered %+v while its handler stalled", r.rep)
		// It may take effect until 2 s past its deadline.
		require.Equal(t, chaos.Unknown, hist.End(stalledOp, nil, r.err, deadline.Add(2*time.Second)),
			"the stalled StartVm ended %s, which says it did not run; it did: %v", message.CodeOf(r.err), r.err)
		t.Logf("X %s evicted; the stalled StartVm ended %s %s after it was sent", x[:8], message.CodeOf(r.err), time.Since(began))

		// The new owner starts and stops the VM: both acknowledged.
		for _, op := range []cloud.VMOp{cloud.VMOpStart, cloud.VMOpStop} {
			msg := map[cloud.VMOp]any{cloud.VMOpStart: api.StartVm{UUID: vm}, cloud.VMOpStop: api.StopVm{UUID: vm}}[op]
			i := hist.Invoke(1, vm, chaoscheck.VMInput{Op: op})
			rep, err := service.Call[api.VmReply](ctx, cl, msg)
			require.NoError(t, err, "%s through the new owner", op)
			require.Equal(t, owner, rep.Node)
			hist.Return(i, chaoscheck.VMOutput{State: rep.VM.State})
		}
		read()
		rec, err := db.VM(ctx, vm)
		require.NoError(t, err)
		require.Equal(t, cloud.VMStopped, rec.State)
		require.Equal(t, int64(3), rec.Version, "created, started, stopped")

		// X resumes once the stalled start's window has passed (its
		// pause is as long as it is), so that a repair of the VM from
		// X's journal cannot pass for that start taking effect: its
		// final write is refused and it journals what its hypervisor did,
		// with the version it had read.
		time.Sleep(time.Until(deadline.Add(2*time.Second + 100*time.Millisecond)))
		read()
		st.free()
		xs := setOf(x).VM
		c.WaitFor(t, time.Second, "X journals the start its record did not follow", func() bool { return xs.Stats().Journaled == 1 })
		require.Len(t, logs.lines("the hypervisor acted but the record did not follow", "vm="+vm, "base=1"), 1)
		failed := "its handler's deadline had passed" // the stall outlived the caller's deadline
		if len(logs.lines("write refused: this node no longer owns the resource", "resource="+vm)) > 0 {
			failed = "refused by the fence"
		}
		t.Logf("X resumed %s after the start was sent; its final write failed: %s", time.Since(began), failed)

		// X rejoins, owns the VM again, and sweeps.
		c.ResumeHeartbeat(x)
		c.WaitFor(t, 2*time.Second, "X rejoined", func() bool { return slices.Contains(c.LiveUUIDs(), x) })
		c.WaitConverged(t, 2*time.Second)
		require.Equal(t, x, c.Owner(vm), "X owns the VM again (same UUID, same place on the ring)")
		dropped := func() []string {
			return logs.lines("vm journal entry dropped: the record changed since it was taken", "vm="+vm)
		}
		c.WaitFor(t, 2*sweep, "X's sweep drops the stale journal entry", func() bool { return len(dropped()) > 0 })
		require.Len(t, dropped(), 1)
		assert.Contains(t, dropped()[0], "base=1")
		assert.Contains(t, dropped()[0], "current=3")
		read()
		time.Sleep(3 * sweep) // more sweeps: nothing moves the record
		read()
		rec, err = db.VM(ctx, vm)
		require.NoError(t, err)
		assert.Equal(t, cloud.VMStopped, rec.State, "the acknowledged stop stays")
		assert.Equal(t, int64(3), rec.Version, "nothing wrote the VM after the stop")
		assert.Empty(t, logs.lines("vm state repaired from the hypervisor", "vm="+vm), "no repair of the VM")
		stats := xs.Stats()
		assert.Equal(t, services.VMStats{Sweeps: stats.Sweeps, StaleJournal: 1}, stats, "no repair, no entry left, one dropped")

		i := hist.Invoke(1, vm, chaoscheck.VMInput{})
		rep, err := service.Call[api.VmReply](ctx, cl, api.GetVm{UUID: vm})
		require.NoError(t, err)
		hist.Return(i, chaoscheck.VMOutput{State: rep.VM.State})
		report, err := chaos.Check(chaoscheck.VMModel(cloud.VMCreated), hist, 10*time.Second, t.ArtifactDir())
		require.NoError(t, err)
		assert.Equal(t, 8, report.Operations, "the stalled start, the new owner's start and stop, four reads of the record and a GetVm")
		assert.True(t, report.OK(), "the VM's history is linearizable: %s", report)
		t.Logf("%s of virtual time; outcomes %v; %s", time.Since(began), hist.Counts(), report)
	})
}

// TestRepairOrderedAfterLaterWrite: a repair from the hypervisor's power
// state whose record is written after the power was read (the evidence
// taken) writes nothing: the next sweep reads the power again and
// repairs from that.
func TestRepairOrderedAfterLaterWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sim, err := simhv.New(simhv.Config{})
		require.NoError(t, err)
		hv := &slowPower{Hypervisor: sim}
		db := memdb.New()
		logs := &logBuffer{}
		const sweep = time.Second
		c, _ := startServices(t, 2, func(int) services.Config {
			return services.Config{Store: db, Hypervisor: hv, PingInterval: pingInterval, VMSweepInterval: sweep,
				Logger: slog.New(slog.NewTextHandler(logs, nil))}
		})
		db.UseFence(c.Store(), memfence.Config{})
		cl := c.Client(t)
		ctx := t.Context()
		vm := addVM(t, ctx, cl)
		_, err = service.Call[api.VmReply](ctx, cl, api.StartVm{UUID: vm})
		require.NoError(t, err)

		// The record says starting (an owner died mid-operation) while
		// the VM runs; the sweep reads the power (on), and right after
		// it, before the repair's write, a write records the VM stopped.
		_, err = db.UpdateVM(ctx, vm, func(v *cloud.VM) error { v.State = cloud.VMStarting; return nil })
		require.NoError(t, err)
		hv.arm(func() bool {
			if v, err := db.VM(ctx, vm); err != nil || v.State != cloud.VMStarting {
				return false // a sweep that began before the record said starting
			}
			_, err := db.UpdateVM(ctx, vm, func(v *cloud.VM) error { v.State = cloud.VMStopped; return nil })
			assert.NoError(t, err)
			return true
		})
		c.WaitFor(t, 2*sweep, "the sweep finds the record changed", func() bool {
			return len(logs.lines("the record changed during the check", "vm="+vm)) > 0
		})
		got, err := db.VM(ctx, vm)
		require.NoError(t, err)
		assert.Equal(t, cloud.VMStopped, got.State, "the repair did not overwrite the later write")
		assert.Empty(t, logs.lines("vm state repaired from the hypervisor", "vm="+vm))

		// The next sweep reads the power again: on; the record follows.
		c.WaitFor(t, 2*sweep, "the next sweep repairs from fresh evidence", func() bool {
			v, err := db.VM(ctx, vm)
			return err == nil && v.State == cloud.VMRunning && len(logs.lines("vm state repaired from the hypervisor", "vm="+vm)) > 0 // logged after the commit
		})
		repaired := logs.lines("vm state repaired from the hypervisor", "vm="+vm)
		require.Len(t, repaired, 1)
		for _, attr := range []string{"from=stopped", "to=running", "power=on", "source=power", "base=4", "version=5"} {
			assert.Contains(t, repaired[0], attr)
		}
	})
}

// slowPower is a hypervisor that runs a hook each time it has answered a
// VMPower, until the hook reports it acted: a write landing just after
// the evidence was taken.
type slowPower struct {
	*simhv.Hypervisor
	mu    sync.Mutex
	after func() bool
}

func (h *slowPower) arm(after func() bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.after = after
}

func (h *slowPower) VMPower(ctx context.Context, host, vm string) (cloud.Power, error) {
	p, err := h.Hypervisor.VMPower(ctx, host, vm)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.after != nil && h.after() {
		h.after = nil
	}
	return p, err
}

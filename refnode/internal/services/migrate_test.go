package services_test

import (
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// migrateJob records a pending migration job of vm to host, as the REST
// API does before it sends MigrateVm, and returns its UUID.
func (f *fixture) migrateJob(t *testing.T, vm, host string, deadline time.Duration) string {
	t.Helper()
	id := message.NewUUID()
	require.NoError(t, f.db.AddJob(t.Context(), api.NewMigrateJob(id, vm, host, "", time.Now(), deadline)))
	return id
}

// otherHost returns a host of hosts that VM vm is not on.
func (f *fixture) otherHost(t *testing.T, vm string, hosts []string) string {
	t.Helper()
	rec, err := f.db.VM(t.Context(), vm)
	require.NoError(t, err)
	for _, h := range hosts {
		if h != rec.HostUUID {
			return h
		}
	}
	t.Fatal("no other host")
	return ""
}

// TestMigrateVM: a migration runs its steps on the VM's owner and the
// target host's owner, records them in its job, moves the VM on the
// hypervisor with its power state, and ends with the VM's record on the
// target; the same message again changes nothing; each refusal fails the
// job with its code and leaves the VM where it was.
func TestMigrateVM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 3, simhv.Config{Latency: 5 * time.Millisecond})
		ctx := t.Context()
		hosts := f.addHosts(t, 3)
		img := f.addImage(t)
		created, err := service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{ImageUUID: img, Name: "web"})
		require.NoError(t, err)
		vm := created.VM.UUID
		_, err = service.Call[api.VmReply](ctx, f.cl, api.StartVm{UUID: vm})
		require.NoError(t, err)
		source, target := created.VM.HostUUID, f.otherHost(t, vm, hosts)

		job := f.migrateJob(t, vm, target, time.Minute)
		msg := api.MigrateVm{UUID: vm, HostUUID: target, Job: job}
		rep, err := service.Call[api.JobReply](ctx, f.cl, msg)
		require.NoError(t, err)
		assert.Equal(t, f.c.Owner(vm), rep.Node, "the VM's owner runs the migration")
		assert.Equal(t, cloud.JobSucceeded, rep.Job.State, "job %+v", rep.Job)
		assert.Equal(t, api.StepMoved, rep.Job.Step)
		assert.Empty(t, rep.Job.Code)
		args, err := api.ParseMigrateArgs(rep.Job.Args)
		require.NoError(t, err)
		assert.Equal(t, api.MigrateArgs{HostUUID: target, Source: source}, args)
		var moved cloud.VM
		require.NoError(t, json.Unmarshal([]byte(rep.Job.Result), &moved))
		assert.Equal(t, target, moved.HostUUID)
		rec, err := f.db.VM(ctx, vm)
		require.NoError(t, err)
		assert.Equal(t, target, rec.HostUUID, "the record names the target")
		assert.Equal(t, cloud.VMRunning, rec.State, "the state is kept")
		p, ok := f.hv.PowerOf(vm)
		assert.True(t, ok)
		assert.Equal(t, simhv.PowerOn, p, "a running VM runs on after the move")
		stored, err := f.db.Job(ctx, job)
		require.NoError(t, err)
		assert.Equal(t, rep.Job.Version, stored.Version)
		assert.GreaterOrEqual(t, stored.Version, int64(4), "one write per step: checked, target-ready, moved")

		again, err := service.Call[api.JobReply](ctx, f.cl, msg)
		require.NoError(t, err)
		assert.Equal(t, stored.Version, again.Job.Version, "the same message again changes nothing")
		after, err := f.db.VM(ctx, vm)
		require.NoError(t, err)
		assert.Equal(t, rec.Version, after.Version)

		// Refusals: each fails its job, and the VM stays.
		down := f.otherHost(t, vm, []string{source})
		f.hv.SetHostDown(down, true)
		refusals := []struct {
			name, vm, host string
			deadline       time.Duration
			code           message.Code
		}{
			{"the host it is on", vm, target, time.Minute, message.ErrConflict.Code},
			{"an unknown host", vm, message.NewUUID(), time.Minute, message.ErrNotFound.Code},
			{"an unknown VM", message.NewUUID(), source, time.Minute, message.ErrNotFound.Code},
			{"a host that does not answer", vm, down, time.Minute, message.ErrFailedPrecondition.Code},
			{"a deadline passed before it started", vm, source, -time.Second, message.ErrTimeout.Code},
		}
		for _, r := range refusals {
			job := f.migrateJob(t, r.vm, r.host, r.deadline)
			rep, err := service.Call[api.JobReply](ctx, f.cl, api.MigrateVm{UUID: r.vm, HostUUID: r.host, Job: job})
			require.NoError(t, err, r.name)
			assert.Equal(t, cloud.JobFailed, rep.Job.State, "%s: %+v", r.name, rep.Job)
			assert.Equal(t, string(r.code), rep.Job.Code, "%s: %s", r.name, rep.Job.Error)
			assert.NotEmpty(t, rep.Job.Error, r.name)
		}
		final, err := f.db.VM(ctx, vm)
		require.NoError(t, err)
		assert.Equal(t, target, final.HostUUID, "no refused migration moved the VM")
		assert.Equal(t, after.Version, final.Version)

		// A message naming a job of another VM is refused, the job unchanged.
		_, err = service.Call[api.JobReply](ctx, f.cl, api.MigrateVm{UUID: message.NewUUID(), HostUUID: target, Job: job})
		assert.ErrorIs(t, err, message.ErrBadRequest)
	})
}

// TestMigrateResumes: a migration whose owner died after a step, or
// whose message never arrived, is ended by the VM's owner's sweep: the
// dead owner's steps are not run again, and a move the hypervisor made
// before its record failed is recorded.
func TestMigrateResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 3, simhv.Config{Latency: 5 * time.Millisecond})
		ctx := t.Context()
		hosts := f.addHosts(t, 3)
		img := f.addImage(t)
		type vmCase struct{ vm, source, target, job string }
		var cases []vmCase
		for range 3 {
			created, err := service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{ImageUUID: img})
			require.NoError(t, err)
			vm := created.VM.UUID
			cases = append(cases, vmCase{vm: vm, source: created.VM.HostUUID, target: f.otherHost(t, vm, hosts)})
		}
		// 0: pending, its message lost. 1: checked by an owner that
		// died. 2: prepared, moved on the hypervisor, the record not
		// written.
		for i := range cases {
			c := &cases[i]
			c.job = f.migrateJob(t, c.vm, c.target, time.Hour)
			if i == 0 {
				continue
			}
			step := api.StepChecked
			if i == 2 {
				step = api.StepPrepared
				require.NoError(t, f.hv.MigrateVM(ctx, c.source, c.target, c.vm))
			}
			_, err := f.db.UpdateJob(ctx, c.job, func(j *cloud.Job) error {
				b, _ := json.Marshal(api.MigrateArgs{HostUUID: c.target, Source: c.source})
				j.Args, j.State, j.Step = string(b), cloud.JobRunning, step
				return nil
			})
			require.NoError(t, err)
		}
		migrations := f.hv.Calls(simhv.OpMigrateVM)
		// A ring change makes every node sweep: kill a node that owns
		// none of the three VMs, or any if each does.
		victim := f.c.Live()[0].UUID()
		for _, n := range f.c.Live() {
			owns := false
			for _, c := range cases {
				owns = owns || f.c.Owner(c.vm) == n.UUID()
			}
			if !owns {
				victim = n.UUID()
			}
		}
		f.c.Kill(victim)
		f.c.WaitGone(t, victim, 2*time.Second)
		f.c.WaitConverged(t, time.Second)
		f.c.WaitFor(t, 40*time.Second, "every job ended by the VMs' owners' sweeps", func() bool {
			for _, c := range cases {
				j, err := f.db.Job(ctx, c.job)
				if err != nil || !j.State.Terminal() {
					return false
				}
			}
			return true
		})
		for i, c := range cases {
			j, err := f.db.Job(ctx, c.job)
			require.NoError(t, err)
			assert.Equal(t, cloud.JobSucceeded, j.State, "case %d: %+v", i, j)
			assert.Equal(t, f.c.Owner(c.vm), j.Node, "case %d: ended by the VM's owner", i)
			rec, err := f.db.VM(ctx, c.vm)
			require.NoError(t, err)
			assert.Equal(t, c.target, rec.HostUUID, "case %d", i)
			_, ok := f.hv.PowerOf(c.vm)
			assert.True(t, ok, "case %d: on a host", i)
		}
		assert.Equal(t, migrations+3, f.hv.Calls(simhv.OpMigrateVM), "one hypervisor move per resumed job: the one made before is idempotent")
	})
}

// TestMigrateGivesUpPastDeadline: a migration whose move keeps failing
// stays running, retried, until its deadline; past it, with the VM still
// on its source, the job fails with code timeout and nothing moved. A
// target that went down does not keep it running forever either.
func TestMigrateGivesUpPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 3, simhv.Config{Latency: 5 * time.Millisecond})
		ctx := t.Context()
		hosts := f.addHosts(t, 3)
		img := f.addImage(t)
		for _, targetDown := range []bool{false, true} {
			created, err := service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{ImageUUID: img})
			require.NoError(t, err)
			vm := created.VM.UUID
			_, err = service.Call[api.VmReply](ctx, f.cl, api.StartVm{UUID: vm})
			require.NoError(t, err)
			source, target := created.VM.HostUUID, f.otherHost(t, vm, hosts)
			job := f.migrateJob(t, vm, target, 10*time.Second)
			msg := api.MigrateVm{UUID: vm, HostUUID: target, Job: job}
			f.hv.FailNext(simhv.OpMigrateVM, 1000)
			if targetDown { // after its step target-ready: the move fails on it
				_, err := f.db.UpdateJob(ctx, job, func(j *cloud.Job) error {
					b, _ := json.Marshal(api.MigrateArgs{HostUUID: target, Source: source})
					j.Args, j.State, j.Step = string(b), cloud.JobRunning, api.StepPrepared
					return nil
				})
				require.NoError(t, err)
				f.hv.FailNext(simhv.OpMigrateVM, 0)
				f.hv.SetHostDown(target, true)
			}
			_, err = service.Call[api.JobReply](ctx, f.cl, msg)
			require.Error(t, err, "target down %t: the move failed", targetDown)
			j, err := f.db.Job(ctx, job)
			require.NoError(t, err)
			assert.Equal(t, cloud.JobRunning, j.State, "target down %t: before its deadline a failed move is tried again", targetDown)
			assert.Equal(t, api.StepPrepared, j.Step)

			time.Sleep(11 * time.Second) // virtual: past the deadline
			rep, err := service.Call[api.JobReply](ctx, f.cl, msg)
			require.NoError(t, err)
			assert.Equal(t, cloud.JobFailed, rep.Job.State, "target down %t: %+v", targetDown, rep.Job)
			assert.Equal(t, string(message.ErrTimeout.Code), rep.Job.Code)
			assert.Contains(t, rep.Job.Error, "nothing moved")
			rec, err := f.db.VM(ctx, vm)
			require.NoError(t, err)
			assert.Equal(t, source, rec.HostUUID, "the VM's record stays on its source")
			p, err := f.hv.VMPower(ctx, source, vm)
			require.NoError(t, err)
			assert.Equal(t, cloud.PowerOn, p, "the VM runs on its source")
			f.hv.FailNext(simhv.OpMigrateVM, 0)
			f.hv.SetHostDown(target, false)
		}
	})
}

// TestMigrateAfterDestroy: a migration's move was made on the hypervisor
// and its record failed (the VM is on the target, its record names the
// source); the VM is destroyed before the job resumes, on the source its
// record names, which no longer has it. The resumed job destroys it on
// the target too and fails with code conflict: no VM is left running on
// a host with its record destroyed.
func TestMigrateAfterDestroy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, 3, simhv.Config{})
		ctx := t.Context()
		hosts := f.addHosts(t, 2)
		created, err := service.Call[api.VmCreated](ctx, f.cl, api.CreateVm{ImageUUID: f.addImage(t)})
		require.NoError(t, err)
		vm, source := created.VM.UUID, created.VM.HostUUID
		target := f.otherHost(t, vm, hosts)
		_, err = service.Call[api.VmReply](ctx, f.cl, api.StartVm{UUID: vm})
		require.NoError(t, err)
		job := f.migrateJob(t, vm, target, time.Hour)
		require.NoError(t, f.hv.MigrateVM(ctx, source, target, vm))
		_, err = f.db.UpdateJob(ctx, job, func(j *cloud.Job) error {
			b, _ := json.Marshal(api.MigrateArgs{HostUUID: target, Source: source})
			j.Args, j.State, j.Step = string(b), cloud.JobRunning, api.StepPrepared
			return nil
		})
		require.NoError(t, err)

		rep, err := service.Call[api.VmReply](ctx, f.cl, api.DestroyVm{UUID: vm})
		require.NoError(t, err, "the source its record names does not have it: destroyed already there")
		assert.Equal(t, cloud.VMDestroyed, rep.VM.State)
		p, ok := f.hv.PowerOf(vm)
		require.True(t, ok, "still on the target, until the job resumes")
		assert.Equal(t, simhv.PowerOn, p)

		j, err := service.Call[api.JobReply](ctx, f.cl, api.MigrateVm{UUID: vm, HostUUID: target, Job: job}) // as the owner's sweep resumes it
		require.NoError(t, err)
		assert.Equal(t, cloud.JobFailed, j.Job.State, "%+v", j.Job)
		assert.Equal(t, string(message.ErrConflict.Code), j.Job.Code)
		assert.Contains(t, j.Job.Error, "destroyed while this migration was pending")
		_, ok = f.hv.PowerOf(vm)
		assert.False(t, ok, "destroyed on the target too")
		got, err := f.db.VM(ctx, vm)
		require.NoError(t, err)
		assert.Equal(t, cloud.VMDestroyed, got.State)
	})
}

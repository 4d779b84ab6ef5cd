package simhv_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const host, vm = "11111111111111111111111111111111", "22222222222222222222222222222222"

func TestLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hv, err := simhv.New(simhv.Config{Latency: 50 * time.Millisecond, OpLatency: map[simhv.Op]time.Duration{simhv.OpPing: time.Second}})
		require.NoError(t, err)
		ctx := t.Context()
		began := time.Now()
		require.NoError(t, hv.Connect(ctx, cloud.Host{UUID: host}))
		assert.Equal(t, 50*time.Millisecond, time.Since(began))
		began = time.Now()
		require.NoError(t, hv.Ping(ctx, host))
		assert.Equal(t, time.Second, time.Since(began), "per-op latency overrides")

		short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		err = hv.Ping(short, host)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "an operation ends with its ctx")

		hv.SetLatency(simhv.OpPing, 0)
		began = time.Now()
		require.NoError(t, hv.Ping(ctx, host))
		assert.Zero(t, time.Since(began))
		assert.Equal(t, 3, hv.Calls(simhv.OpPing))
	})
}

func TestVMsAndFailures(t *testing.T) {
	ctx := context.Background()
	hv, err := simhv.New(simhv.Config{})
	require.NoError(t, err)
	assert.ErrorIs(t, hv.Ping(ctx, host), simhv.ErrUnknown, "a host never connected")
	require.NoError(t, hv.Connect(ctx, cloud.Host{UUID: host}))
	assert.ErrorIs(t, hv.StartVM(ctx, host, vm), simhv.ErrUnknown, "a VM never created")
	require.NoError(t, hv.CreateVM(ctx, host, cloud.VM{UUID: vm}))
	power := func() simhv.Power { p, _ := hv.PowerOf(vm); return p }
	assert.Equal(t, simhv.PowerOff, power())
	assert.Error(t, hv.RebootVM(ctx, host, vm), "rebooting a VM that is off")
	require.NoError(t, hv.StartVM(ctx, host, vm))
	assert.Equal(t, simhv.PowerOn, power())
	require.NoError(t, hv.RebootVM(ctx, host, vm))

	hv.FailNext(simhv.OpStopVM, 2)
	assert.ErrorIs(t, hv.StopVM(ctx, host, vm), simhv.ErrInjected)
	assert.ErrorIs(t, hv.StopVM(ctx, host, vm), simhv.ErrInjected)
	assert.Equal(t, simhv.PowerOn, power(), "a failed operation did not happen")
	require.NoError(t, hv.StopVM(ctx, host, vm), "FailNext counts down")

	hv.SetHostDown(host, true)
	assert.ErrorIs(t, hv.Ping(ctx, host), simhv.ErrHostDown)
	assert.ErrorIs(t, hv.Connect(ctx, cloud.Host{UUID: host}), simhv.ErrHostDown)
	assert.ErrorIs(t, hv.StartVM(ctx, host, vm), simhv.ErrHostDown)
	hv.SetHostDown(host, false)
	require.NoError(t, hv.Ping(ctx, host))
	require.NoError(t, hv.DestroyVM(ctx, host, vm))
	_, ok := hv.PowerOf(vm)
	assert.False(t, ok)
	require.NoError(t, hv.DestroyVM(ctx, host, vm), "a VM the host does not have is destroyed already")
	assert.ErrorIs(t, hv.StartVM(ctx, host, vm), simhv.ErrUnknown, "but it cannot be started")
}

// TestMigrateVM: a move keeps the VM's power state, can be made again
// once done, and fails for a host down or a VM on neither host.
func TestMigrateVM(t *testing.T) {
	ctx := context.Background()
	hv, err := simhv.New(simhv.Config{})
	require.NoError(t, err)
	const other = "1f0e2d3c4b5a69788796a5b4c3d2e1f0"
	require.NoError(t, hv.Connect(ctx, cloud.Host{UUID: host}))
	require.NoError(t, hv.Connect(ctx, cloud.Host{UUID: other}))
	require.NoError(t, hv.CreateVM(ctx, host, cloud.VM{UUID: vm}))
	require.NoError(t, hv.StartVM(ctx, host, vm))
	require.NoError(t, hv.MigrateVM(ctx, host, other, vm))
	p, ok := hv.PowerOf(vm)
	assert.True(t, ok)
	assert.Equal(t, simhv.PowerOn, p, "it runs on after the move")
	assert.ErrorIs(t, hv.StopVM(ctx, host, vm), simhv.ErrUnknown, "gone from the source")
	require.NoError(t, hv.MigrateVM(ctx, host, other, vm), "moved already: idempotent")
	require.NoError(t, hv.StopVM(ctx, other, vm), "on the target")
	assert.ErrorIs(t, hv.MigrateVM(ctx, host, other, "00000000000000000000000000000abc"), simhv.ErrUnknown, "on neither host")
	hv.SetHostDown(host, true)
	assert.ErrorIs(t, hv.MigrateVM(ctx, other, host, vm), simhv.ErrHostDown)
	hv.FailNext(simhv.OpMigrateVM, 1)
	hv.SetHostDown(host, false)
	assert.ErrorIs(t, hv.MigrateVM(ctx, other, host, vm), simhv.ErrInjected)
	require.NoError(t, hv.MigrateVM(ctx, other, host, vm))
	assert.Equal(t, 6, hv.Calls(simhv.OpMigrateVM), "failed calls included")

	adopting, err := simhv.New(simhv.Config{Adopt: true})
	require.NoError(t, err)
	require.NoError(t, adopting.MigrateVM(ctx, host, other, vm), "another process's VM is adopted on the target")
	_, ok = adopting.PowerOf(vm)
	assert.True(t, ok)
}

func TestFailRate(t *testing.T) {
	ctx := context.Background()
	always, err := simhv.New(simhv.Config{FailRate: 1})
	require.NoError(t, err)
	assert.ErrorIs(t, always.Connect(ctx, cloud.Host{UUID: host}), simhv.ErrInjected)

	half, err := simhv.New(simhv.Config{FailRate: 0.5, Seed: 42})
	require.NoError(t, err)
	failed := 0
	for range 1000 {
		if half.Connect(ctx, cloud.Host{UUID: host}) != nil {
			failed++
		}
	}
	assert.InDelta(t, 500, failed, 100)
}

func TestConfig(t *testing.T) {
	_, err := simhv.New(simhv.Config{Latency: -1, FailRate: 2, OpLatency: map[simhv.Op]time.Duration{"warp": 1, simhv.OpPing: -1}})
	require.Error(t, err)
	for _, want := range []string{"Latency -1ns is negative", "FailRate 2", `OpLatency names unknown("warp")`, "OpLatency[ping] -1ns"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.Len(t, simhv.Ops(), 9)
	assert.Equal(t, "ping", simhv.OpPing.String())
}

// TestAdopt: a simulator with Adopt takes over hosts and VMs another
// process's simulator connected and created; without it they are unknown.
func TestAdopt(t *testing.T) {
	ctx := t.Context()
	strict, err := simhv.New(simhv.Config{})
	require.NoError(t, err)
	assert.ErrorIs(t, strict.StartVM(ctx, host, vm), simhv.ErrUnknown, "without Adopt, a host never connected is unknown")

	h, err := simhv.New(simhv.Config{Adopt: true})
	require.NoError(t, err)
	require.NoError(t, h.Ping(ctx, host), "a host connected elsewhere is adopted")
	require.NoError(t, h.RebootVM(ctx, host, vm), "a reboot finds an adopted VM running")
	p, ok := h.PowerOf(vm)
	assert.True(t, ok)
	assert.Equal(t, simhv.PowerOn, p)
	require.NoError(t, h.StopVM(ctx, host, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"))
	p, _ = h.PowerOf("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
	assert.Equal(t, simhv.PowerOff, p)
	h.SetHostDown(host, true)
	assert.ErrorIs(t, h.StartVM(ctx, host, vm), simhv.ErrHostDown, "an adopted host can still be down")
}

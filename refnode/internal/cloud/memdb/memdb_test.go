package memdb_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/memdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecords(t *testing.T) {
	ctx := context.Background()
	s := memdb.New()
	a, b := "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

	require.NoError(t, s.AddHost(ctx, cloud.Host{UUID: a, Status: cloud.HostConnected}))
	require.NoError(t, s.AddHost(ctx, cloud.Host{UUID: b}))
	assert.ErrorIs(t, s.AddHost(ctx, cloud.Host{UUID: a}), message.ErrBadRequest, "a UUID is added once")
	assert.ErrorIs(t, s.AddHost(ctx, cloud.Host{UUID: "nope"}), message.ErrInvalidUUID)
	assert.ErrorIs(t, s.AddHost(ctx, cloud.Host{UUID: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}), message.ErrInvalidUUID, "UUIDs must be canonical")

	hosts, err := s.Hosts(ctx)
	require.NoError(t, err)
	require.Len(t, hosts, 2)
	assert.Equal(t, b, hosts[0].UUID, "sorted by UUID")
	hosts[0].Name = "changed"
	h, err := s.Host(ctx, b)
	require.NoError(t, err)
	assert.Empty(t, h.Name, "returned records are copies")

	_, err = s.Host(ctx, "cccccccccccccccccccccccccccccccc")
	assert.ErrorIs(t, err, message.ErrNotFound)

	h, err = s.UpdateHost(ctx, a, func(h *cloud.Host) error { h.Takeovers++; return nil })
	require.NoError(t, err)
	assert.Equal(t, 1, h.Takeovers)
	boom := errors.New("boom")
	_, err = s.UpdateHost(ctx, a, func(h *cloud.Host) error { h.Takeovers = 99; return boom })
	assert.Same(t, boom, err, "the update's error is returned as is")
	h, _ = s.Host(ctx, a)
	assert.Equal(t, 1, h.Takeovers, "a failed update changes nothing")
	_, err = s.UpdateHost(ctx, a, func(h *cloud.Host) error { h.UUID = b; return nil })
	assert.ErrorIs(t, err, message.ErrBadRequest, "UUIDs never change")

	require.NoError(t, s.AddImage(ctx, cloud.Image{UUID: a, Name: "img"}))
	img, err := s.Image(ctx, a)
	require.NoError(t, err)
	assert.Equal(t, "img", img.Name)
	imgs, _ := s.Images(ctx)
	assert.Len(t, imgs, 1)

	require.NoError(t, s.AddVM(ctx, cloud.VM{UUID: a, State: cloud.VMCreated}))
	vm, err := s.UpdateVM(ctx, a, func(v *cloud.VM) error { v.State = cloud.VMRunning; return nil })
	require.NoError(t, err)
	assert.Equal(t, cloud.VMRunning, vm.State)
	vms, _ := s.VMs(ctx)
	assert.Equal(t, []cloud.VM{vm}, vms)
	_, err = s.VM(ctx, b)
	assert.ErrorIs(t, err, message.ErrNotFound)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.Hosts(canceled)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestViews(t *testing.T) {
	ctx := context.Background()
	s := memdb.New()
	const node, other = "11111111111111111111111111111111", "22222222222222222222222222222222"
	const id = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	v, w := s.For(node), s.For(other)
	require.NoError(t, v.AddHost(ctx, cloud.Host{UUID: id}))
	s.SetUnreachable(node, true)
	calls := map[string]error{
		"AddHost":    v.AddHost(ctx, cloud.Host{UUID: other}),
		"AddImage":   v.AddImage(ctx, cloud.Image{UUID: id}),
		"AddVM":      v.AddVM(ctx, cloud.VM{UUID: id}),
		"Host":       second(v.Host(ctx, id)),
		"Hosts":      second(v.Hosts(ctx)),
		"UpdateHost": second(v.UpdateHost(ctx, id, func(*cloud.Host) error { return nil })),
		"Image":      second(v.Image(ctx, id)),
		"Images":     second(v.Images(ctx)),
		"VM":         second(v.VM(ctx, id)),
		"VMs":        second(v.VMs(ctx)),
		"UpdateVM":   second(v.UpdateVM(ctx, id, func(*cloud.VM) error { return nil })),
	}
	for name, err := range calls {
		assert.ErrorIs(t, err, memdb.ErrUnreachable, "%s through a cut-off view", name)
	}
	hosts, err := w.Hosts(ctx)
	require.NoError(t, err, "other nodes are unaffected")
	assert.Len(t, hosts, 1, "nothing changed through the cut-off view")
	s.SetUnreachable(node, false)
	_, err = v.Host(ctx, id)
	assert.NoError(t, err)
	require.NoError(t, w.AddImage(ctx, cloud.Image{UUID: id}))
	require.NoError(t, w.AddVM(ctx, cloud.VM{UUID: id}))
	_, err = w.UpdateVM(ctx, id, func(*cloud.VM) error { return nil })
	assert.NoError(t, err)
	_, err = w.UpdateHost(ctx, id, func(*cloud.Host) error { return nil })
	assert.NoError(t, err)
	for _, err := range []error{second(w.Image(ctx, id)), second(w.Images(ctx)), second(w.VM(ctx, id)), second(w.VMs(ctx))} {
		assert.NoError(t, err)
	}
}

func second[T any](_ T, err error) error { return err }

package api_test

import (
	"testing"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRegister(t *testing.T) {
	reg := message.NewRegistry()
	require.NoError(t, api.Register(reg))
	require.NoError(t, api.Register(reg), "idempotent")
	for _, tc := range []struct {
		msg    any
		name   string
		routed bool
	}{
		{api.AddHost{}, "refnode.v1.AddHost", true},
		{api.GetHost{}, "refnode.v1.GetHost", true},
		{api.ReconnectHost{}, "refnode.v1.ReconnectHost", true},
		{api.AllocateHost{}, "refnode.v1.AllocateHost", false},
		{api.AddImage{}, "refnode.v1.AddImage", true},
		{api.GetImage{}, "refnode.v1.GetImage", true},
		{api.SetImageName{}, "refnode.v1.SetImageName", true},
		{api.CreateVm{}, "refnode.v1.CreateVm", false},
		{api.StartVm{}, "refnode.v1.StartVm", true},
		{api.StopVm{}, "refnode.v1.StopVm", true},
		{api.RebootVm{}, "refnode.v1.RebootVm", true},
		{api.DestroyVm{}, "refnode.v1.DestroyVm", true},
		{api.GetVm{}, "refnode.v1.GetVm", true},
		{api.HostReply{}, "refnode.v1.HostReply", false},
		{api.HostAllocated{}, "refnode.v1.HostAllocated", false},
		{api.ImageReply{}, "refnode.v1.ImageReply", false},
		{api.ImageNameSet{}, "refnode.v1.ImageNameSet", false},
		{api.VmCreated{}, "refnode.v1.VmCreated", false},
		{api.VmReply{}, "refnode.v1.VmReply", false},
	} {
		name, err := reg.NameOf(tc.msg)
		require.NoError(t, err)
		assert.Equal(t, tc.name, name)
		_, routed := tc.msg.(message.Routed)
		assert.Equal(t, tc.routed, routed, "%s routed by its resource", tc.name)
	}
	assert.Equal(t, "x", api.StartVm{UUID: "x"}.ResourceUUID())
}

package api_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
)

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		m     interface{ Validate() error }
		field string // "" if valid
	}{
		{api.CreateVm{Name: "web", CPUs: 2, MemoryMB: 1024}, ""},
		{api.CreateVm{}, ""},
		{api.CreateVm{CPUs: -1}, "cpus"},
		{api.CreateVm{CPUs: api.MaxCPUs + 1}, "cpus"},
		{api.CreateVm{MemoryMB: 99999999999999}, "memory_mb"},
		{api.CreateVm{Name: strings.Repeat("x", 10000)}, "name"},
		{api.AddImage{SizeMB: -5}, "size_mb"},
		{api.AddImage{URL: strings.Repeat("u", api.MaxURLBytes+1)}, "url"},
		{api.AddHost{Name: strings.Repeat("h", 10*1024)}, "name"},
		{api.AddHost{Address: "\xff"}, "address"},
		{api.AddHost{Name: "h1", Address: "10.0.0.1"}, ""},
		{api.SetImageName{Name: "ubuntu"}, ""},
		{api.SetImageName{Name: "", IfName: new("")}, ""},
		{api.SetImageName{Name: strings.Repeat("n", api.MaxNameBytes+1)}, "name"},
		{api.SetImageName{Name: "n", IfName: new(strings.Repeat("n", api.MaxNameBytes+1))}, "if_name"},
		{api.SetImageName{Name: "n", IfName: new("\xff")}, "if_name"},
	} {
		err := c.m.Validate()
		if c.field == "" {
			assert.NoError(t, err, "%+v", c.m)
			continue
		}
		assert.ErrorIs(t, err, message.ErrBadRequest, "%T", c.m)
		if err != nil {
			assert.Contains(t, err.Error(), c.field, "the error names the field")
		}
	}
}

package cloud_test

import (
	"fmt"
	"testing"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/stretchr/testify/assert"
)

var states = []cloud.VMState{cloud.VMCreated, cloud.VMStarting, cloud.VMRunning, cloud.VMStopping, cloud.VMStopped, cloud.VMRebooting, cloud.VMDestroyed}

func TestTransition(t *testing.T) {
	type result struct{ during, after cloud.VMState }
	valid := map[cloud.VMOp]map[cloud.VMState]result{
		cloud.VMOpStart: {
			cloud.VMCreated: {cloud.VMStarting, cloud.VMRunning},
			cloud.VMStopped: {cloud.VMStarting, cloud.VMRunning},
			cloud.VMRunning: {cloud.VMStarting, cloud.VMRunning},
		},
		cloud.VMOpStop: {
			cloud.VMRunning:   {cloud.VMStopping, cloud.VMStopped},
			cloud.VMStarting:  {cloud.VMStopping, cloud.VMStopped},
			cloud.VMStopping:  {cloud.VMStopping, cloud.VMStopped},
			cloud.VMRebooting: {cloud.VMStopping, cloud.VMStopped},
			cloud.VMStopped:   {cloud.VMStopping, cloud.VMStopped},
		},
		cloud.VMOpReboot: {
			cloud.VMRunning: {cloud.VMRebooting, cloud.VMRunning},
		},
		cloud.VMOpDestroy: {
			cloud.VMCreated: {"", cloud.VMDestroyed}, cloud.VMStarting: {"", cloud.VMDestroyed},
			cloud.VMRunning: {"", cloud.VMDestroyed}, cloud.VMStopping: {"", cloud.VMDestroyed},
			cloud.VMStopped: {"", cloud.VMDestroyed}, cloud.VMRebooting: {"", cloud.VMDestroyed},
		},
	}
	for op, table := range valid {
		for _, from := range states {
			t.Run(fmt.Sprintf("%s from %s", op, from), func(t *testing.T) {
				during, after, err := cloud.Transition(from, op)
				want, ok := table[from]
				if !ok {
					assert.ErrorIs(t, err, message.ErrConflict, "invalid transitions conflict with the state")
					assert.Contains(t, err.Error(), fmt.Sprintf("cannot %s a VM that is %s", op, from))
					return
				}
				assert.NoError(t, err)
				assert.Equal(t, want, result{during, after})
			})
		}
	}
	_, _, err := cloud.Transition(cloud.VMRunning, "explode")
	assert.ErrorIs(t, err, message.ErrBadRequest)
}

func TestStrings(t *testing.T) {
	for _, s := range states {
		assert.Equal(t, string(s), s.String())
	}
	assert.Equal(t, `unknown("zombie")`, cloud.VMState("zombie").String())
	assert.Equal(t, `unknown("x")`, cloud.VMOp("x").String())
	assert.Equal(t, "start", cloud.VMOpStart.String())
	assert.Equal(t, "connected", cloud.HostConnected.String())
	assert.Equal(t, `unknown("")`, cloud.HostStatus("").String())
	assert.True(t, cloud.VMRebooting.Transitional())
	assert.False(t, cloud.VMStopped.Transitional())
}

func TestErrors(t *testing.T) {
	assert.ErrorIs(t, cloud.NotFound("vm", "x"), message.ErrNotFound)
	assert.ErrorIs(t, cloud.Exists("vm", "x"), message.ErrAlreadyExists)
}

func TestRepair(t *testing.T) {
	for _, c := range []struct {
		st   cloud.VMState
		p    cloud.Power
		want cloud.VMState
	}{
		{cloud.VMStarting, cloud.PowerOn, cloud.VMRunning},
		{cloud.VMStarting, cloud.PowerOff, cloud.VMStopped},
		{cloud.VMStarting, cloud.PowerUnknown, cloud.VMStopped},
		{cloud.VMStopping, cloud.PowerOn, cloud.VMRunning},
		{cloud.VMRebooting, cloud.PowerOn, cloud.VMRunning},
		{cloud.VMStopped, cloud.PowerOn, cloud.VMRunning},
		{cloud.VMRunning, cloud.PowerOff, cloud.VMStopped},
		{cloud.VMCreated, cloud.PowerOff, cloud.VMCreated},
		{cloud.VMCreated, cloud.PowerOn, cloud.VMRunning},
		{cloud.VMRunning, cloud.PowerUnknown, cloud.VMRunning},
		{cloud.VMDestroyed, cloud.PowerOn, cloud.VMDestroyed},
	} {
		got, fix := cloud.Repair(c.st, c.p)
		if got != c.want || fix != (c.want != c.st) {
			t.Errorf("Repair(%s, %s) = %s, %v; want %s, %v", c.st, c.p, got, fix, c.want, c.want != c.st)
		}
		if got.Transitional() {
			t.Errorf("Repair(%s, %s) = %s, a transitional state", c.st, c.p, got)
		}
	}
}

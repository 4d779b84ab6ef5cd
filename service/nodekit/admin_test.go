package nodekit

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
)

func TestCounters(t *testing.T) {
	c := newCounters()
	node := message.NewUUID()
	c.Observe(bus.Observation{Op: bus.OpHandle, ServiceID: bus.APIPortal})
	c.Observe(bus.Observation{Op: bus.OpHandle, ServiceID: bus.APIPortal, Err: errors.New("x")})
	c.Observe(bus.Observation{Op: bus.OpHandle, ServiceID: bus.ServiceID("vmInstance", node)})
	c.Observe(bus.Observation{Op: bus.OpHandle, ServiceID: bus.ServiceID("vmInstance", node), Err: errors.New("x")})
	c.Observe(bus.Observation{Op: bus.OpCall, ServiceID: bus.ServiceID("host", node)})
	assert.Equal(t, uint64(2), c.portal.Load())
	assert.Equal(t, uint64(1), c.portalFailed.Load())
	assert.Equal(t, map[string]uint64{"vmInstance": 2}, c.handled, "only handled messages count, by service")
	assert.Equal(t, map[string]uint64{"vmInstance": 1}, c.failed)
}

package membus_test

import (
	"testing"

	"github.com/cloudbus-go/cloudbus/bus/bustest"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type env struct{ net *membus.Network }

func (e env) Transport(t *testing.T, node string) driver.Transport {
	tr := e.net.Transport(node)
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func (e env) Kill(t *testing.T, node string) { e.net.Kill(node) }

func (e env) Cut(t *testing.T, node string) { e.net.Partition(node, true) }

func (e env) Heal(t *testing.T, node string) { e.net.Partition(node, false) }

func TestConformance(t *testing.T) {
	bustest.Run(t, bustest.Harness{
		Features: bustest.Features{CanKill: true, KilledQueuesPersist: true, CanCut: true},
		New:      func(t *testing.T) bustest.Env { return env{net: membus.New()} },
	})
}

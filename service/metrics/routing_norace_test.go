//go:build !race

package metrics_test

import (
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service/metrics"
)

// TestObserveForwardAllocs holds Observe's promise for forwards and
// re-routes: no allocation once their series exists.
func TestObserveForwardAllocs(t *testing.T) {
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	target := service1 + "." + message.NewUUID()
	for _, o := range []bus.Observation{
		{Op: bus.OpCall, ServiceID: target, Type: startType, Duration: time.Millisecond, Forward: true},
		{Op: bus.OpSend, ServiceID: target, Type: startType, Duration: time.Microsecond, Forward: true},
		{Op: bus.OpReroute, ServiceID: target, Type: startType, Err: message.ErrNotOwner},
	} {
		if n := testing.AllocsPerRun(100, func() { m.Observe(o) }); n != 0 {
			t.Errorf("Observe(%s, forward %t) allocates %.0f times; want 0 once its series exists", o.Op, o.Forward, n)
		}
	}
}

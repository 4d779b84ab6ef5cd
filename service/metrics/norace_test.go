//go:build !race

package metrics_test

import (
	"testing"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service/metrics"
)

// TestObserveAllocs holds Observe's promise: no allocation once its
// series exists, on the message path (the race detector allocates, so
// this runs without it).
func TestObserveAllocs(t *testing.T) {
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	node := message.NewUUID()
	for _, o := range []bus.Observation{
		{Op: bus.OpCall, ServiceID: service1 + "." + node, Type: startType, Duration: time.Millisecond},
		{Op: bus.OpHandle, ServiceID: service1 + "." + node, Type: startType, Duration: time.Millisecond, Queued: time.Microsecond},
		{Op: bus.OpReply, ServiceID: service1 + "." + node, Type: startType},
		{Op: bus.OpReject, ServiceID: service1 + "." + node, Type: startType, Err: message.ErrTimeout},
	} {
		if n := testing.AllocsPerRun(100, func() { m.Observe(o) }); n != 0 {
			t.Errorf("Observe(%s) allocates %.0f times; want 0 once its series exists", o.Op, n)
		}
	}
}

package metrics_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/metrics"
)

// A node observed by its Metrics: one call, then a scrape of /metrics.
func Example() {
	ctx := context.Background()
	net, store := membus.New(), memstore.New(memstore.Config{})
	id := message.NewUUID()
	tr := net.Transport(id)
	m, err := metrics.New(metrics.Config{Transport: tr})
	if err != nil {
		fmt.Println(err)
		return
	}
	n, err := service.StartNode(ctx, service.Config{Node: id, Transport: tr, OwnTransport: true,
		Store: store.For(id), Registry: registry(), Heartbeat: heartbeat.TestConfig(), Observer: m,
		Services: []service.Service{service.API("vmInstance", vmMux())}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer n.Close()
	m.SetNode(n)

	_, err = service.Call[Started](ctx, n, StartVm{VM: message.NewUUID()})
	fmt.Println(err)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, `cloudbus_messages_total{op="call"`) ||
			strings.HasPrefix(line, "cloudbus_ring_members ") ||
			strings.HasPrefix(line, `cloudbus_node_state{state="serving"}`) {
			fmt.Print(line)
		}
	}
	// Output:
	// <nil>
	// cloudbus_messages_total{op="call",service="vmInstance",type="metricstest.v1.StartVm"} 1
	// cloudbus_node_state{state="serving"} 1
	// cloudbus_ring_members 1
}

package service_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

// Inventory is an API message about a resource with a body of some size.
type Inventory struct {
	Resource string   `json:"resource"`
	Items    []string `json:"items,omitempty"`
}

// ResourceUUID makes Inventory a message.Routed type.
func (m Inventory) ResourceUUID() string { return m.Resource }

// BenchmarkPortalCall measures a Client call through api.portal on a
// one-node membus cluster (client -> portal -> owner -> portal ->
// client), against the same call made by the node itself (node ->
// owner -> node), so the difference is the portal's cost; "small" is a
// body of one UUID, "4KiB" one with 93 strings more:
//
//	go test ./service -run '^$' -bench PortalCall -benchmem
func BenchmarkPortalCall(b *testing.B) {
	reg := message.NewRegistry()
	message.MustRegister[Inventory](reg, "svctest.v1.Inventory")
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, r *bus.Request, m Inventory) (Inventory, error) {
		return m, nil
	})
	c := servicetest.Start(b, servicetest.Options{Nodes: 1, Registry: reg,
		Services: func(int, nodekit.Env) []service.Service { return []service.Service{service.API("inventory", mux)} }})
	client := c.Client(b)
	node := c.Node(0)
	for _, size := range []struct {
		name  string
		items int
	}{{"small", 0}, {"4KiB", 93}} {
		msg := Inventory{Resource: message.NewUUID()}
		for i := range size.items {
			msg.Items = append(msg.Items, fmt.Sprintf("item-%03d-%s", i, message.NewUUID()))
		}
		for _, via := range []struct {
			name   string
			caller service.Caller
		}{{"portal", client}, {"direct", node}} {
			b.Run(size.name+"/"+via.name, func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					got, err := service.Call[Inventory](ctx, via.caller, msg)
					if err != nil || len(got.Items) != size.items {
						b.Fatal(got, err)
					}
				}
			})
		}
	}
}

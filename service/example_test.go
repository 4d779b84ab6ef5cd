package service_test

import (
	"context"
	"fmt"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
)

// StartVm names the VM it is about, so it runs on the VM's owner.
type StartVm struct{ VM string }

func (m StartVm) ResourceUUID() string { return m.VM }

// Started is StartVm's reply.
type Started struct{ Node string }

// Three management nodes host a "vmInstance" service; one call about a VM
// runs on the VM's owner.
func Example() {
	ctx := context.Background()
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, r *bus.Request, m StartVm) (Started, error) {
		return Started{Node: r.Node()}, nil // start the VM here
	})
	net, store, reg := membus.New(), memstore.New(memstore.Config{}), message.NewRegistry()
	var nodes []*service.Node
	for range 3 {
		id := message.NewUUID()
		n, err := service.StartNode(ctx, service.Config{Node: id, Transport: net.Transport(id), OwnTransport: true,
			Store: store.For(id), Registry: reg, Heartbeat: heartbeat.TestConfig(),
			Services: []service.Service{service.API("vmInstance", mux)}})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer n.Close()
		nodes = append(nodes, n)
	}
	_ = nodes[0].AwaitMembers(ctx, 3)
	vm := message.NewUUID()
	reply, err := service.Call[Started](ctx, nodes[0], StartVm{VM: vm})
	owner, _ := nodes[0].Owner(vm)
	fmt.Println(reply.Node == owner, err)
	// Output: true <nil>
}

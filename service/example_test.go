package service_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cloudbus-go/cloudbus/bus"
	"github.com/cloudbus-go/cloudbus/bus/driver"
	"github.com/cloudbus-go/cloudbus/bus/membus"
	"github.com/cloudbus-go/cloudbus/heartbeat"
	"github.com/cloudbus-go/cloudbus/heartbeat/memstore"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/service"
)

// StartVm is an API message about a VM. It names the VM
// (message.Routed), so every sender routes it to the VM's owner.
type StartVm struct {
	VMUUID string `json:"vm_uuid"`
}

// ResourceUUID returns the VM's UUID.
func (m StartVm) ResourceUUID() string { return m.VMUUID }

// VmStarted is its reply.
type VmStarted struct {
	VMUUID string `json:"vm_uuid"`
	Node   string `json:"node"`
}

// vmService is a stateless VM service: it accepts StartVm directly and
// through api.portal.
func vmService() service.Service {
	mux := bus.NewMux()
	bus.Handle(mux, func(ctx context.Context, r *bus.Request, m StartVm) (VmStarted, error) {
		return VmStarted{VMUUID: r.Resource(), Node: r.Node()}, nil
	})
	return service.API("vmInstance", mux)
}

// Two management nodes and a client in one process: the client's API
// message goes to api.portal, a portal routes it to the VM's owner, and
// the reply comes back.
func Example() {
	ctx := context.Background()
	reg := message.NewRegistry()
	message.MustRegister[StartVm](reg, "example.v1.StartVm")
	message.MustRegister[VmStarted](reg, "example.v1.VmStarted")
	net, store := membus.New(), memstore.New(memstore.Config{})

	var nodes []*service.Node
	for _, id := range []string{"3694776ab31a45709259254a018913ca", "5a1e8b2c9d3f4e6a8b7c6d5e4f3a2b1c"} {
		n, err := service.StartNode(ctx, service.Config{
			Node: id, Prefix: "zstack", Transport: net.Transport(id), OwnTransport: true, Store: store.For(id),
			Registry: reg, Heartbeat: heartbeat.LocalConfig(), Services: []service.Service{vmService()},
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer n.Close()
		nodes = append(nodes, n)
	}
	// Every ring copy learns of every node within a beat or two.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := nodes[0].AwaitConverged(wctx); err != nil {
		fmt.Println(err)
		return
	}
	for _, q := range net.Queues() {
		if q.Kind == driver.QueueDurable && strings.Contains(q.Name, ".message.") {
			fmt.Println(q.Name)
		}
	}

	tr := net.Transport("cli")
	defer tr.Close()
	client, _ := service.NewClient(ctx, service.ClientConfig{Transport: tr, Prefix: "zstack", Registry: reg})
	defer client.Close()
	vm := "932763162d054c04adaab6ab498c9139"
	reply, err := service.Call[VmStarted](ctx, client, StartVm{VMUUID: vm})
	owner, _ := nodes[0].Owner(vm)
	fmt.Println(reply.VMUUID, reply.Node == owner, err)
	// Output:
	// zstack.message.api.portal
	// zstack.message.cloudbus-membership.3694776ab31a45709259254a018913ca
	// zstack.message.cloudbus-membership.5a1e8b2c9d3f4e6a8b7c6d5e4f3a2b1c
	// zstack.message.vmInstance.3694776ab31a45709259254a018913ca
	// zstack.message.vmInstance.5a1e8b2c9d3f4e6a8b7c6d5e4f3a2b1c
	// 932763162d054c04adaab6ab498c9139 true <nil>
}

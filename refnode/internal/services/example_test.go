package services_test

import (
	"context"
	"fmt"

	"github.com/cloudbus-go/cloudbus/fence/memfence"
	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/memdb"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
	"github.com/cloudbus-go/cloudbus/refnode/internal/services"
	"github.com/cloudbus-go/cloudbus/service"
	"github.com/cloudbus-go/cloudbus/service/nodekit"
	"github.com/cloudbus-go/cloudbus/service/servicetest"
)

// Two management nodes with refnode's services over one store and one
// simulated hypervisor; a client adds a host and an image, renames the
// image with a compare-and-set, creates a VM and starts it, all through
// api.portal.
func Example() {
	ctx := context.Background()
	reg := message.NewRegistry()
	_ = api.Register(reg)
	db := memdb.New()
	hv, _ := simhv.New(simhv.Config{})
	c, err := servicetest.New(ctx, servicetest.Options{
		Nodes:    2,
		Registry: reg,
		Services: func(int, nodekit.Env) []service.Service {
			set, _ := services.New(services.Config{Store: db, Hypervisor: hv})
			return set.Services()
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	db.UseFence(c.Store(), memfence.Config{}) // writes are fenced by the nodes' heartbeat records
	defer c.Close()
	cl, _ := c.NewClient(ctx)
	defer cl.Close()

	host, image := message.NewUUID(), message.NewUUID()
	h, _ := service.Call[api.HostReply](ctx, cl, api.AddHost{UUID: host, Address: "10.0.0.11"})
	fmt.Println("host", h.Host.Status, "by its owner:", h.Node == c.Owner(host))
	_, _ = service.Call[api.ImageReply](ctx, cl, api.AddImage{UUID: image, Name: "ubuntu"})
	for _, want := range []string{"ubuntu", "debian"} { // the second finds "ubuntu-24.04"
		n, err := service.Call[api.ImageNameSet](ctx, cl, api.SetImageName{UUID: image, Name: "ubuntu-24.04", IfName: &want})
		fmt.Println("image renamed from", want+":", n.Set, "now", n.Image.Name, err)
	}

	vm, _ := service.Call[api.VmCreated](ctx, cl, api.CreateVm{ImageUUID: image})
	fmt.Println("vm", vm.VM.State, "on the portal's node:", vm.Node == vm.Portal)
	r, err := service.Call[api.VmReply](ctx, cl, api.StartVm{UUID: vm.VM.UUID})
	fmt.Println("vm", r.VM.State, "by its owner:", r.Node == c.Owner(vm.VM.UUID), err)
	// Output:
	// host connected by its owner: true
	// image renamed from ubuntu: true now ubuntu-24.04 <nil>
	// image renamed from debian: false now ubuntu-24.04 <nil>
	// vm created on the portal's node: true
	// vm running by its owner: true <nil>
}

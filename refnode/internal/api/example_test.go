package api_test

import (
	"fmt"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
)

// The messages are registered under stable, versioned names; a message
// about an existing resource names it (message.Routed), so the SDK routes
// it to the resource's owner, by its canonical UUID.
func Example() {
	reg := message.NewRegistry()
	if err := api.Register(reg); err != nil {
		fmt.Println(err)
		return
	}
	name, _ := reg.NameOf(api.StartVm{})
	fmt.Println(name)

	res, routed, _ := message.ResourceOf(api.StartVm{UUID: "93276316-2D05-4C04-ADAA-B6AB498C9139"})
	fmt.Println("routed by", res, routed)
	_, routed, _ = message.ResourceOf(api.CreateVm{})
	fmt.Println("CreateVm routed by a resource:", routed)
	// Output:
	// refnode.v1.StartVm
	// routed by 932763162d054c04adaab6ab498c9139 true
	// CreateVm routed by a resource: false
}

package api_test

import (
	"fmt"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/api"
)

// The messages are registered under stable, versioned names; a message
// about an existing resource names it, so it is routed to its owner.
func Example() {
	reg := message.NewRegistry()
	if err := api.Register(reg); err != nil {
		fmt.Println(err)
		return
	}
	name, _ := reg.NameOf(api.StartVm{})
	fmt.Println(name)

	var msg any = api.StartVm{UUID: "932763162d054c04adaab6ab498c9139"}
	if r, ok := msg.(api.Routed); ok {
		fmt.Println("routed by", r.Resource())
	}
	_, routed := any(api.CreateVm{}).(api.Routed)
	fmt.Println("CreateVm routed by a resource:", routed)
	// Output:
	// refnode.v1.StartVm
	// routed by 932763162d054c04adaab6ab498c9139
	// CreateVm routed by a resource: false
}

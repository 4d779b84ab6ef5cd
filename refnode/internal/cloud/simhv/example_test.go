package simhv_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud/simhv"
)

// A slow hypervisor whose next start fails.
func Example() {
	ctx := context.Background()
	hv, _ := simhv.New(simhv.Config{Latency: time.Millisecond})
	const host, vm = "11111111111111111111111111111111", "22222222222222222222222222222222"
	_ = hv.Connect(ctx, cloud.Host{UUID: host})
	_ = hv.CreateVM(ctx, host, cloud.VM{UUID: vm})

	hv.FailNext(simhv.OpStartVM, 1)
	err := hv.StartVM(ctx, host, vm)
	fmt.Println(errors.Is(err, simhv.ErrInjected))
	fmt.Println(hv.StartVM(ctx, host, vm))
	fmt.Println(hv.PowerOf(vm))
	// Output:
	// true
	// <nil>
	// on true
}

package cloud_test

import (
	"errors"
	"fmt"

	"github.com/cloudbus-go/cloudbus/message"
	"github.com/cloudbus-go/cloudbus/refnode/internal/cloud"
)

// The VM state machine: what a VM passes through and ends in, and an
// invalid operation answered with a coded error.
func ExampleTransition() {
	during, after, _ := cloud.Transition(cloud.VMStopped, cloud.VMOpStart)
	fmt.Println(during, "→", after)

	_, _, err := cloud.Transition(cloud.VMStopped, cloud.VMOpReboot)
	fmt.Println(errors.Is(err, message.ErrConflict))
	fmt.Println(err)
	// Output:
	// starting → running
	// true
	// conflict: the resource's state conflicts with the request: cannot reboot a VM that is stopped; reboot is allowed from running
}

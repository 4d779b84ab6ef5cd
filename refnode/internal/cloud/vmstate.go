package cloud

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cloudbus-go/cloudbus/message"
)

// VMState is the state of a VM. The transitional states last while an
// operation runs on the VM's owner.
type VMState string

// The VM states.
const (
	// VMCreated: defined on its host, never started.
	VMCreated VMState = "created"
	// VMStarting: a start is running.
	VMStarting VMState = "starting"
	// VMRunning: running.
	VMRunning VMState = "running"
	// VMStopping: a stop is running.
	VMStopping VMState = "stopping"
	// VMStopped: stopped.
	VMStopped VMState = "stopped"
	// VMRebooting: a reboot is running.
	VMRebooting VMState = "rebooting"
	// VMDestroyed: destroyed; the record stays, every operation fails.
	VMDestroyed VMState = "destroyed"
)

// String returns the state, or `unknown("x")` for a value this package
// does not define.
func (s VMState) String() string {
	switch s {
	case VMCreated, VMStarting, VMRunning, VMStopping, VMStopped, VMRebooting, VMDestroyed:
		return string(s)
	default:
		return fmt.Sprintf("unknown(%q)", string(s))
	}
}

// Transitional reports whether s lasts only while an operation runs.
func (s VMState) Transitional() bool {
	return s == VMStarting || s == VMStopping || s == VMRebooting
}

// VMOp is an operation on an existing VM.
type VMOp string

// The VM operations.
const (
	// VMOpStart starts a created or stopped VM; a running VM stays
	// running, and the start succeeds.
	VMOpStart VMOp = "start"
	// VMOpStop stops a running VM (or one left transitional by a dead
	// owner); a stopped VM stays stopped, and the stop succeeds.
	VMOpStop VMOp = "stop"
	// VMOpReboot reboots a running VM.
	VMOpReboot VMOp = "reboot"
	// VMOpDestroy destroys a VM in any state but destroyed.
	VMOpDestroy VMOp = "destroy"
)

// String returns the operation, or `unknown("x")`.
func (o VMOp) String() string {
	switch o {
	case VMOpStart, VMOpStop, VMOpReboot, VMOpDestroy:
		return string(o)
	default:
		return fmt.Sprintf("unknown(%q)", string(o))
	}
}

// transitions is the one table of valid operations: for each operation,
// the states it may start from, the state while it runs ("" for none)
// and the state it ends in.
var transitions = map[VMOp]struct {
	from          []VMState
	during, after VMState
}{
	VMOpStart:   {[]VMState{VMCreated, VMStopped, VMRunning}, VMStarting, VMRunning},
	VMOpStop:    {[]VMState{VMRunning, VMStarting, VMStopping, VMRebooting, VMStopped}, VMStopping, VMStopped},
	VMOpReboot:  {[]VMState{VMRunning}, VMRebooting, VMRunning},
	VMOpDestroy: {[]VMState{VMCreated, VMStarting, VMRunning, VMStopping, VMStopped, VMRebooting}, "", VMDestroyed},
}

// Transition returns the state a VM in state from is in while op runs
// (during; "" if op has no transitional state) and the state it ends in
// when op succeeds (after). If op is not allowed in from it fails with an
// error matching message.ErrConflict that says which states op is allowed
// from; an unknown op fails with message.ErrBadRequest.
func Transition(from VMState, op VMOp) (during, after VMState, err error) {
	t, ok := transitions[op]
	if !ok {
		return "", "", message.ErrBadRequest.WithDetails(fmt.Sprintf("unknown VM operation %s", op))
	}
	if !slices.Contains(t.from, from) {
		names := make([]string, len(t.from))
		for i, s := range t.from {
			names[i] = string(s)
		}
		return "", "", message.ErrConflict.WithDetails(fmt.Sprintf(
			"cannot %s a VM that is %s; %s is allowed from %s", op, from, op, strings.Join(names, ", ")))
	}
	return t.during, t.after, nil
}

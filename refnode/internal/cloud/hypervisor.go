package cloud

import "context"

// Hypervisor runs VMs on hosts: the agent protocol of a real cloud
// (libvirt over an agent, say), simulated by package simhv.
//
// A Hypervisor is safe for concurrent use; the services call it from
// message handlers and from the host tracker at once. Every method blocks
// for the operation's duration and must return when ctx ends, with an
// error wrapping ctx's. A failed operation may have partly happened:
// callers treat the outcome as unknown (the services answer such
// failures as message.ErrInternal, or message.ErrTimeout for a ctx
// deadline). Arguments are not kept after a method returns.
type Hypervisor interface {
	// Connect connects (or reconnects) a management node to the host's
	// agent. It is idempotent.
	Connect(ctx context.Context, h Host) error
	// Ping checks that a connected host answers.
	Ping(ctx context.Context, hostUUID string) error
	// CreateVM defines vm on its host, stopped.
	CreateVM(ctx context.Context, hostUUID string, vm VM) error
	// StartVM starts a defined VM; starting a running VM succeeds.
	StartVM(ctx context.Context, hostUUID, vmUUID string) error
	// StopVM stops a VM; stopping a stopped VM succeeds.
	StopVM(ctx context.Context, hostUUID, vmUUID string) error
	// RebootVM reboots a running VM.
	RebootVM(ctx context.Context, hostUUID, vmUUID string) error
	// DestroyVM stops the VM if needed and removes it from its host;
	// destroying a VM the host does not have succeeds (a destroy sent
	// again after its first run acted must not fail forever).
	DestroyVM(ctx context.Context, hostUUID, vmUUID string) error
	// MigrateVM moves a VM from host from to host to, keeping its power
	// state (a live migration of a running VM). It is idempotent: a VM
	// already on to, and gone from from, is not moved again, so a
	// migration cut short may be made again.
	MigrateVM(ctx context.Context, from, to, vmUUID string) error
	// VMPower reports the VM's power state as its host knows it:
	// PowerOn, PowerOff, or PowerUnknown if the host has no such VM (or
	// cannot tell). It changes nothing.
	VMPower(ctx context.Context, hostUUID, vmUUID string) (Power, error)
}

// Power is a VM's power state as its host reports it: the truth about
// the VM, which the records follow.
type Power string

// The power states.
const (
	// PowerOn: the VM runs.
	PowerOn Power = "on"
	// PowerOff: the VM is defined and does not run.
	PowerOff Power = "off"
	// PowerUnknown: the host does not know the VM or cannot tell.
	PowerUnknown Power = "unknown"
)

// Repair returns the stable state a VM recorded as st should have given
// its power state p, and whether that differs from st: a VM left
// transitional (a write that failed, an owner that died mid-operation)
// or recorded against the hypervisor's truth. A running VM is running; a
// VM that is off is stopped, unless it was never started (created); with
// the power unknown, only a transitional state is repaired (to stopped:
// an operation that did not finish did not leave it running as far as
// anyone can tell). A destroyed VM stays destroyed.
func Repair(st VMState, p Power) (VMState, bool) {
	want := st
	switch {
	case st == VMDestroyed:
	case p == PowerOn:
		want = VMRunning
	case p == PowerOff && st != VMCreated:
		want = VMStopped
	case p == PowerUnknown && st.Transitional():
		want = VMStopped
	}
	return want, want != st
}

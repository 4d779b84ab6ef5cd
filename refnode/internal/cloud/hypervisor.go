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
	// StartVM starts a defined VM.
	StartVM(ctx context.Context, hostUUID, vmUUID string) error
	// StopVM stops a VM; stopping a stopped VM succeeds.
	StopVM(ctx context.Context, hostUUID, vmUUID string) error
	// RebootVM reboots a running VM.
	RebootVM(ctx context.Context, hostUUID, vmUUID string) error
	// DestroyVM stops the VM if needed and removes it from its host.
	DestroyVM(ctx context.Context, hostUUID, vmUUID string) error
}

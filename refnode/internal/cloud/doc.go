// Package cloud is the domain of refnode, the reference management node:
// the records of hosts, images and VMs, the VM state machine, and the two
// interfaces the services work through, [Store] (where records live) and
// [Hypervisor] (what runs VMs on hosts).
//
// # Design
//
// The services of refnode are stateless in the sense of the design:
// they keep no state about which node manages what. Records live in a
// [Store], shared by every management node (SQL tables in production,
// package sqldb; package memdb for one process), and every operation on
// one resource is serialized on the resource's ring owner, so a service
// may read a record, talk to the hypervisor and write the record back
// without a lock: no other node operates on that resource meanwhile.
//
// # VM states
//
// A VM is created stopped-but-defined ([VMCreated]), then started,
// stopped, rebooted and destroyed. [Transition] is the one table of valid
// operations: it names the state a VM passes through while an operation
// runs and the state it ends in. An operation the table does not allow
// fails with an error matching message.ErrConflict; retrying it fails
// the same way until the VM's state changes. A start of a running VM and
// a stop of a stopped one are allowed (they end where they began): an
// operation sent again after its owner died mid-operation, once the
// hypervisor had acted, finds the VM in the state it asked for and
// succeeds.
//
// A transitional state ([VMStarting], [VMStopping], [VMRebooting]) is
// seen by another operation only if the owner died in the middle of one;
// Stop and Destroy are allowed from it, so the new owner can bring such a
// VM back to a stable state.
//
// # Errors
//
// Unknown UUIDs fail with errors matching message.ErrNotFound, malformed
// ones with message.ErrInvalidUUID, and adding a record whose UUID exists
// with message.ErrBadRequest. These codes survive the bus, so a caller on
// another node or in a client matches them with errors.Is.
package cloud

// Package services holds refnode's three services, hosted by every
// management node: "vmInstance" ([VMService]), "host" ([HostService])
// and "image" ([ImageService]). They are stateless in the design's
// sense: records live in a cloud.Store shared by all nodes, VMs run
// behind a cloud.Hypervisor, and the only thing that says which node
// manages what is the ring.
//
// # Routing
//
//   - AddHost, GetHost, ReconnectHost go to the host service of the
//     host's ring owner; AddImage, GetImage and SetImageName to the
//     image service of the image's owner; StartVm, StopVm, RebootVm,
//     DestroyVm and GetVm to the VM service of the VM's owner. Each
//     names its resource (message.Routed), so the bus refuses one that
//     was not routed by that UUID, and its serial execution per resource
//     covers it; a handler reads the UUID from the request
//     (bus.Request.Resource).
//   - CreateVm is a creation message: the local node's VM service handles
//     it, and asks its own host service for a host with AllocateHost, a
//     message about no resource, which service.Call sends to the local
//     node.
//   - Every API message is accepted through api.portal (service.APIService),
//     so a service.Client drives everything; AllocateHost is internal.
//
// Because the bus runs the messages about one resource one at a time on
// its owner, a handler reads a record, calls the hypervisor and writes the
// record back without any lock.
//
// # Errors
//
// A handler's error crosses the bus as a message.Error: a request's own
// fault with its code and details (bad_request, invalid_uuid, not_found),
// a lost claim as not_owner, a hypervisor's failure as internal with the
// hypervisor's words (the VM's state says what holds). A database error
// is answered with its class only (internal, or timeout when a deadline
// ended it: outcome unknown either way) and "the database failed; node N
// logged the cause with message id M": its text names the database's
// host, port, name and user, which is for the node's log (logged at Warn
// with the message id), not for API clients.
//
// A VM operation the VM's state does not allow (a reboot of a stopped VM)
// is refused with conflict, and the refusal is recorded with the
// message like a reply (fenced, in the operation's transaction): a later
// copy of the message (a redelivery after a lost acknowledgement, a
// portal's resend after node_left, a message moved from a dead node's
// queue) gets the same refusal instead of running where the state has
// changed since its caller was told it did not happen.
//
// # Hosts and takeover
//
// The owner of a host tracks it: a goroutine of the [HostService], started
// by Start and stopped by Stop, pings the hosts it tracks every
// Config.PingInterval through the hypervisor, marks a silent host
// disconnected and reconnects it when it answers again. When the ring
// changes (service.RingListener), the tracker lists the hosts, reconnects
// those it owns now but did not manage (the takeover of a dead or leaving
// node's hosts, logged and counted in [HostStats]) and stops tracking
// those it no longer owns. RingChanged only signals the tracker, so a slow
// hypervisor holds up neither message delivery nor other listeners.
//
// A host's record says which node manages it (cloud.Host.ManagedBy) and
// how often it was taken over; the tracker writes a host's status only
// while the record names its own node, so a node that lost a host to a
// new owner cannot overwrite the new owner's writes.
//
// # Repairs
//
// A VM operation calls the hypervisor inside its fenced transaction and
// then records the outcome. If that final write fails after the
// hypervisor acted (the database link dropped, the transaction timed
// out, the node was paused past its eviction and the fence refused it),
// the record is behind the VM. The [VMService]'s sweeper repairs it:
// every Config.VMSweepInterval and at every ring change, for each VM its
// node owns, in a transaction fenced by the node's claim, it reads the
// record, asks the hypervisor for the VM's power state then (inside the
// transaction, so the evidence is taken at the moment of the repair),
// and writes the stable state the power calls for (cloud.Repair). A
// repair is a write like any other: its update is a compare-and-set on
// the version it read (cloud.VM.Version), so it never moves a record that
// an acknowledged write changed after its evidence was taken; such a
// repair writes nothing, and the next sweep looks again.
//
// Where the hypervisor cannot tell a VM's power (PowerUnknown: refnode
// serve's per-process simulators, simhv with Adopt), a repair may
// conclude only what its own node saw: each failed final write after a
// hypervisor success is journaled (fence.Journal) with the state the
// hypervisor put the VM in and the record's version the operation read,
// and a sweep applies the entry only if the record is still at that
// version; otherwise an acknowledged write came after, and the record
// says what its caller was told, so the entry is dropped, logged ("vm
// journal entry dropped: the record changed since it was taken", with
// the base and current versions) and counted ([VMStats].StaleJournal).
// A sweep also drops the entries of VMs its node does not own (any
// more) once their listed version is above the entry's base; an entry
// whose VM nobody wrote since is kept, for when the node owns the VM
// again. With the power unknown and no current entry, a repair moves
// only a transitional state (to stopped), never a stable one. It cannot
// order two unrecorded hypervisor calls on different nodes (each node's
// write failed, both read the same version): whichever node owns the VM
// first applies its own entry, and the other's is then stale; only a
// hypervisor that reports the power settles that case. The journal lives
// in memory: a node that crashes loses its entries, and their records
// stay behind the hypervisor until it reports the truth or an operator
// acts.
package services

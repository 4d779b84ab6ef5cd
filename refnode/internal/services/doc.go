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
package services

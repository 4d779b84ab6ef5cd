// Package service is the management node of the design: it hosts every
// service in one process, keeps a ring copy of the live nodes, routes
// each message about a resource to the resource's owner, serves the
// shared api.portal queue, and reacts to nodes joining, leaving and dying.
//
// # Design
//
// A [Node] gets a fresh version-4 UUID at every start. For each [Service]
// it declares <prefix>.message.<service>.<nodeUUID> and consumes it; its
// API portal consumes <prefix>.message.api.portal with the portals of all
// other nodes. Nodes share nothing but the heartbeat records
// (heartbeat.Store) and the ring's membership.
//
// Routing follows the article:
//
//   - a message about a resource goes to "<service>.<owner>", where owner
//     is Locate(resourceUUID) on the sender's ring ([Node.Call],
//     [Node.Send], [Node.Route]). A payload type names its resource by
//     implementing message.Routed (or a sender names it with
//     bus.WithResource): the resource lives in the message, so no caller
//     can forget it, and every receiver refuses with
//     message.ErrBadRequest a Routed message whose envelope names no
//     resource or another one;
//   - creation messages and messages about no resource go to the local
//     node, which is always reachable ([Node.Call] again: it applies the
//     rule);
//   - API messages go to api.portal; whichever node's portal takes one
//     forwards it by the same rule (services declare their API types with
//     [APIService]) and the reply reaches the original caller. A [Client]
//     calls through the portal without joining anything.
//
// # Which call to use
//
// One question decides: is the caller a management node?
//
//	caller                       call                                       goes to
//	a service on a node          service.Call[Resp](ctx, node, svc, msg)    the resource's owner, or this node
//	                             node.Send(ctx, svc, msg)                   the same, one-way
//	a process that is not a node service.Call[Resp](ctx, client, msg)    api.portal, then as above
//	                             service.Send(ctx, client, msg)                      the same, one-way
//	anything                     bus.Call[Resp](ctx, b, serviceID, msg)     exactly that service id's queue
//
// [Node.Call] and [Client.Call] are the untyped forms of the first and
// third. bus.Call is the layer below: it sends to the service id it is
// given ("<service>.<node>" or api.portal) and does not follow ring
// changes; use it for an internal service of your own whose node you
// chose yourself. Every call ends by its ctx deadline, bus.WithTimeout
// or the configured default, and its error says whether a retry is safe
// (message.Code.Retry).
//
// A call keeps one message id across its attempts (re-routes, retries,
// the portal's forward), and bus.WithID gives it yours, so a caller that
// sends a logical message again keeps its id and the handler can
// deduplicate by bus.Request.ID. With bus.WithRetry(max) the caller
// declares the message idempotent: where its owner died or left mid-call
// (message.ErrNodeLeft, outcome unknown), [Node.Call] and the portal
// (for [Client.Call], which carries the option as a header) send it
// again, with the same id, to the new owner once this node's ring no
// longer names the old one, up to max times within ctx; the first
// attempt may still run there (a survivor moves its message), so if a
// later attempt is refused (not_owner, bad_request, ...) the call ends
// with node_left, its outcome unknown. bus.Call itself
// never retries: it only carries the option, which the portal applies
// to what it receives through api.portal.
//
// Messages about one resource run one at a time on the owner, in arrival
// order, and different resources in parallel (bounded); a resource whose
// line is full answers message.ErrBusy. That is the lock-free design: no
// distributed lock, because every operation on a resource is serialized
// on its one owner.
//
// # Membership
//
// Joining keeps the property "no ring ever contains a node before its
// queues exist": the queues are declared before the heartbeat record is
// written and NodeJoined is broadcast. Leaving keeps the mirror property
// "a leaving node leaves every ring before its queues are deleted": the
// node broadcasts NodeLeft and has every peer whose record is fresh
// confirm it dropped the node (a dead peer not yet evicted is not waited
// for), drains its queues with markers, moves what arrived after them to
// the resources' owners, deletes each queue once it is empty, and only
// then deletes its heartbeat record. A queue it could not empty stays,
// recorded, for the survivors to drain.
//
// Ring copies follow the lifecycle events and the heartbeat monitor's
// view of the store, and are reconciled from the store when they differ
// for two checks in a row, so a missed event heals. Events are hints and
// the store is the truth: a NodeJoined is applied only if the store holds
// that life's record, and a NodeLeft only if the store holds no record of
// the node, so a forged, replayed or reordered event changes no ring (it
// is logged). [Node.Fingerprint] lets nodes and tests compare copies.
//
// A node that stops beating is evicted by a peer after the eviction
// threshold (heartbeat.Config); the evictor broadcasts NodeLeft, every
// ring drops the node, and calls pending towards it fail at once with
// message.ErrNodeLeft: outcome unknown, since the message may still run,
// there or on the new owner. A node that finds its own record gone stops
// handling messages and rejoins with a new epoch, or, with
// Config.NoRejoin, [Node.Run] returns [ErrEvicted].
//
// A node cut off from the bus while its database works (a zombie: it
// beats, but no message reaches it) reports the cut with its beats, from
// its transport's state; a peer whose bus is up evicts it once it has
// reported the bus down for longer than the lease, so its callers get
// node_left and the survivors own its resources about as fast as if it
// had died. It keeps trying to rejoin and does once its bus heals. A bus
// outage every node sees evicts nobody (rule 5 of package heartbeat).
//
// # Nothing stranded
//
// Each node records its queues in the heartbeat store
// (heartbeat.QueueBook), since a broker such as RabbitMQ cannot list
// them. Every node sweeps when it starts, when a node leaves or is
// evicted, and every EvictAfter: the queues of a node absent from the
// store are drained by one survivor, the owner of that node's UUID on the
// ring, with bus.CloudBus.Reroute: each message goes to its resource's
// current owner (a message about no resource to a member chosen by its
// id), a message whose deadline has passed is counted
// ([Node.DrainStats]) and dropped (a request) or moved to the dead-letter
// queue (a one-way message), and the queue is deleted once it is empty and
// unused. Draining stops if the node comes back. An evicted node keeps
// its queues (for the survivors, or for its own next life); a leaving
// node empties and deletes its own. So a one-way message sent to a node
// that died is handled at least once by the new owner, and nothing waits
// in a dead node's queue for the broker to expire it. A receiver that
// does not own a one-way message's resource on its ring forwards it to
// the owner (at most three hops while rings converge) or gives it back
// to its queue; it never drops it. A handler failure of a one-way message
// that does not say the message is wrong (not_owner from a fenced owner,
// a database that failed) gives it back for another attempt within its
// deadline, on api.portal to any node's portal; a message that cannot run
// goes to the dead-letter queue with its reason (the bus package's
// "One-way messages").
//
// While ring copies converge, a receiver checks that its own ring agrees
// it owns the resource ([HeaderOwner]) and otherwise answers
// message.ErrNotOwner without running the handler; the sender re-routes.
//
// # Writes that authorize
//
// The ring routes; it does not stop a node that lost ownership from
// writing. Every handler of a message about a resource finds the node's
// claim on it (node UUID and heartbeat epoch) in its ctx
// (fence.ClaimFrom); fence.For(ctx, r) adds the message's idempotency
// key, and package fence/sqlfence makes the handler's transaction commit
// only while the claim holds, once per message. The guard's checks hold
// when a handler starts; the fence holds when it commits.
//
// # Takeover
//
// Services react to membership through [RingListener] (nodes joined or
// left) and [EvictionListener], called off the message path; a service
// takes over what [Node.Owns] now says is its own, such as reconnecting
// the hosts of a node that died.
//
// # Lifecycle
//
// [StartNode] (or [NewNode] and [Node.Start]) returns a node once it
// serves; [Node.AwaitMembers] and [Node.AwaitConverged] wait, bounded by
// a ctx, until the cluster has formed or every ring copy agrees, with no
// polling in user code. [Node.Done] and [Node.Err] say when and why a
// node stopped by itself (peers evicted it with Config.NoRejoin set);
// [Node.Close] leaves in order and returns the same error.
//
// # Testing
//
// Package service/servicetest starts an N-node cluster with the user's
// services on an in-memory bus and store in one call, with fault
// injection (kill a node, stop its heartbeat, drop its traffic), and runs
// inside testing/synctest for virtual time.
package service

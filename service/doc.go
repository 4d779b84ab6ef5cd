// Package service is the management node: it hosts every service in one
// process, keeps a ring copy of the live nodes, routes each message about a
// resource to the resource's owner, serves the shared api.portal queue, and
// reacts to nodes joining, leaving and dying. docs/design.md ("Why
// stateless", "Delivery rules") gives the reasons behind the rules below.
//
// # Hello world
//
// A service is a [bus.Mux] of handlers under a name. Three nodes host it;
// a call about a VM runs on the VM's owner:
//
//	type StartVm struct{ VM string }
//
//	func (m StartVm) ResourceUUID() string { return m.VM } // message.Routed
//
//	type Started struct{ Node string }
//
//	mux := bus.NewMux()
//	bus.Handle(mux, func(ctx context.Context, r *bus.Request, m StartVm) (Started, error) {
//		return Started{Node: r.Node()}, nil // start the VM here
//	})
//	net, store, reg := membus.New(), memstore.New(memstore.Config{}), message.NewRegistry()
//	var nodes []*service.Node
//	for range 3 {
//		id := message.NewUUID()
//		n, err := service.StartNode(ctx, service.Config{Node: id, Transport: net.Transport(id), OwnTransport: true,
//			Store: store.For(id), Registry: reg, Heartbeat: heartbeat.TestConfig(),
//			Services: []service.Service{service.API("vmInstance", mux)}})
//		if err != nil {
//			return err
//		}
//		defer n.Close()
//		nodes = append(nodes, n)
//	}
//	_ = nodes[0].AwaitMembers(ctx, 3)
//	reply, err := service.Call[Started](ctx, nodes[0], StartVm{VM: message.NewUUID()})
//
// A type a service's mux handles or replies with by value that the
// registry does not name is registered as "<service>.v1.<Type>" when the
// node is created; register your own names (message.Register) where a
// client in another process or language must know them.
//
// # Routing
//
// [Call] and [Send] take a [*Node] or a [*Client]. A message goes to the
// service whose mux handles its type: on the owner of the resource it is
// about (its type implements message.Routed, or bus.WithResource names
// one), or on the calling node if it is about none (a creation). A
// [Client] sends through api.portal; the portal of whichever node takes
// the message routes it by the same rule, for the types a service accepts
// there ([API], [APIService]). Messages about one resource run one at a
// time on its owner, in arrival order; a resource whose line is full
// answers message.ErrBusy. A receiver whose own ring says it is not the
// owner answers message.ErrNotOwner without running the handler, and the
// sender routes again, with the same message id.
//
// With bus.WithRetry the caller declares a message idempotent: a call
// whose owner left mid-call (message.ErrNodeLeft, outcome unknown) is sent
// again, with the same id, to the new owner. Every call ends by its
// deadline, and its error's code says whether a retry is safe
// (message.Code.Retry).
//
// # Membership
//
// A node declares its queues before it joins, so no ring names a node
// whose queues do not exist; a leaving node leaves every ring before its
// queues are deleted. Ring copies follow the lifecycle events and are
// reconciled with the heartbeat store, which is the truth: a forged or
// replayed event changes no ring. A node that stops beating is evicted
// after the eviction threshold (heartbeat.Config), calls pending towards it
// fail with message.ErrNodeLeft, and its queues are drained to the new
// owners by a survivor. A node that finds itself evicted rejoins with a new
// epoch or, with Config.NoRejoin, [Node.Run] returns [ErrEvicted]. A node
// cut from the broker while its database works is evicted like a dead one;
// an outage every node sees evicts nobody.
//
// # Writes that authorize
//
// The ring routes; it does not stop a node that lost ownership from
// writing. A handler of a message about a resource finds the node's claim
// on it in its ctx (fence.ClaimFrom); package fence/sqlfence commits the
// handler's transaction only while the claim holds, once per message.
//
// # Hooks and lifecycle
//
// Services react to membership through [RingListener] and
// [EvictionListener], called off the message path. [StartNode] (or
// [NewNode] and [Node.Start]) returns a node once it serves;
// [Node.AwaitMembers] and [Node.AwaitConverged] wait until the cluster
// formed or every ring copy agrees. [Node.Done] and [Node.Err] say when
// and why a node stopped by itself; [Node.Close] leaves in order.
//
// Package service/servicetest starts an N-node cluster with your services
// on an in-memory bus, with fault injection: on an in-memory store inside
// testing/synctest, or on SQLite, PostgreSQL or MySQL with your SQL
// repository. Package service/nodekit runs the same services as a
// production program.
package service

// Package servicetest starts a cluster of management nodes inside a Go
// test, with the user's services, on an in-memory bus (bus/membus) and an
// in-memory heartbeat store (heartbeat/memstore), and injects faults into
// it.
//
// [Start] starts a cluster in a test and closes it when the test ends;
// [New] does the same for a program or an Example, which closes it. Run
// a test inside testing/synctest (synctest.Test) and its heartbeats,
// evictions and waits take virtual time: instant and deterministic. The
// package Example and the example of [Cluster.StopHeartbeat] run in real
// time and show the usual sequence: inject a fault, wait until the
// faulty node is gone from every ring ([Cluster.AwaitGone]), wait until
// the rings agree ([Cluster.AwaitConverged]), then check that a survivor
// handles the resource.
//
// # Live nodes
//
// Everything the cluster waits for is stated in terms of its live nodes
// ([Cluster.Live]). A node is live while all of these hold:
//
//   - it serves: its state is service.StateServing (started, not
//     leaving, stopped or evicted);
//   - it was not killed ([Cluster.Kill]);
//   - it is not cut off from the heartbeat store ([Cluster.StopHeartbeat],
//     until [Cluster.ResumeHeartbeat]);
//   - it is not fenced (service.Node.Fenced): its last successful beat is
//     not older than the lease.
//
// The live nodes are the ones every ring copy should hold once the
// cluster settles. What each fault does to membership:
//
//   - Kill: the node stops beating and its bus traffic ends; it is not
//     live at once, and stays in the other nodes' rings until a peer
//     evicts it, EvictAfter to EvictAfter+Interval after its last beat.
//   - StopHeartbeat: the node keeps running and consuming its queues but
//     cannot beat; it is not live at once (it also fences itself after
//     the lease), and peers evict it like a killed node. Its own ring
//     copy goes stale: it still holds every node, itself included, and
//     the node does not learn of its eviction until ResumeHeartbeat.
//     After ResumeHeartbeat it is live again once it serves unfenced:
//     at once if it was not evicted; if it was, it notices at its next
//     beat and rejoins with a new epoch (same UUID) one interval later,
//     unless Options.NoRejoin is set, in which case it stops for good.
//   - Partition cuts the node off from the bus, not from the store, and
//     its transport reports it (as a RabbitMQ transport reports a lost
//     connection): it is not live at once; it goes on beating, reporting
//     its bus down, and a peer evicts it as a zombie BusDownAfter (the
//     lease) later, plus up to two intervals; the survivors then drain
//     its queues. Once healed it rejoins with a new epoch.
//   - Drop silently loses the node's bus traffic, a fault its transport
//     does not see: it goes on beating, so it stays live, stays in the
//     membership and in every ring copy, and keeps owning its resources.
//     Messages for it wait in its queues and what it sends vanishes
//     until the fault is healed.
//   - Stop: the node leaves in order; it is not live once it starts
//     leaving, and every peer that answers has dropped it from its ring
//     before Stop returns.
//
// # Waiting
//
// [Cluster.Converged] reports whether every live node's ring holds
// exactly the live nodes, and [Cluster.Gone] whether no live node's ring
// holds a given node. Each has an Await form bounded by a context and a
// Wait form that fails the test after a timeout. Every wait polls every
// millisecond with a deadline, which costs nothing in a synctest bubble.
//
// # Network faults against real servers
//
// Package service/servicetest/proxy is a TCP proxy a test owns between
// its code and a real broker or database, to cut, stall and heal the
// network of that test alone.
package servicetest

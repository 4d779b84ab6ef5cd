// Package servicetest starts a cluster of management nodes inside a Go
// test, with the user's services, on an in-memory bus (bus/membus) and
// heartbeat store (heartbeat/memstore), and injects faults into it.
//
// [Start] starts a cluster in a test and closes it when the test ends;
// [New] does the same for a program or an Example, which closes it. Run
// a test inside testing/synctest and its heartbeats, evictions and waits
// take virtual time. The package example shows a fault and a takeover.
//
// # Live nodes
//
// Every wait is stated in terms of the live nodes ([Cluster.Live]): those
// that serve (service.StateServing), were not killed ([Cluster.Kill]),
// are not cut off from the store ([Cluster.StopHeartbeat]) or the bus
// ([Cluster.Partition]), and whose lease has not expired. Once the cluster settles,
// every ring holds exactly the live nodes. Each fault method says what
// it does to membership; [Cluster.Drop] is the one a node's transport
// does not see, so the node stays live and in every ring.
//
// # Network faults against real servers
//
// Package service/servicetest/proxy is a TCP proxy a test puts between
// its code and a real broker or database, to cut, stall and heal that
// test's connections alone.
package servicetest

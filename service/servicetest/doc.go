// Package servicetest starts a cluster of management nodes inside a Go
// test, with the user's services, on an in-memory bus (bus/membus), and
// injects faults into it. The heartbeat records live in memory
// (heartbeat/memstore) or, so that a test runs the code its users ship,
// in a SQL database beside the services' own tables ([Options].Database).
//
// [Start] starts a cluster in a test and closes it when the test ends;
// [New] does the same for a program or an Example, which closes it. The
// package examples show a fault and a takeover, in memory and on SQLite.
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
// # The services' environment
//
// [Options].Services builds each node's services from its
// [nodekit.Env], as a production node built with package
// service/nodekit does: the node's UUID, its view of the heartbeat store,
// the timing and logger and, on SQL, a pool of its own on the database
// (Env.DB), the prefix of the services' tables (Env.Tables, created by
// [Options].Schema) and a fence (Env.Fence, package fence/sqlfence) whose
// claims are checked against the cluster's heartbeat table. A service
// that writes through Env.Fence is tested with the fencing it has in
// production: a node that lost its resource cannot commit.
//
// # In memory, in virtual time
//
// With Options.Database "" (the default) the heartbeat records live in a
// memstore.Store ([Cluster.Store]) and the services get no database. Run
// the test inside testing/synctest and its heartbeats, evictions and
// waits take virtual time: a fault that evicts a node costs nothing.
//
// # On SQL, in real time
//
// With Options.Database "sqlite", a PostgreSQL URL or a MySQL DSN, each
// node opens its own pools (one for its heartbeat store, one for its
// services), its heartbeat store (heartbeat/sqlstore), its fence, and
// migrates the Schema, as a production node does when it starts. Every
// table is named with a random prefix ([Database].Prefix) that Close
// drops, or lives in a temporary SQLite file that Close removes.
//
// The database's clock stamps the beats, so testing/synctest cannot
// drive such a cluster: do not start one inside synctest.Test. Time is
// real, and the timing is slower than in memory ([SQLHeartbeat]: beat
// 100 ms, evict 1 s). The faults that end in an eviction take that
// time: [Cluster.StopHeartbeat] evicts the node about EvictAfter (1 s)
// after the fault, [Cluster.Partition] about its lease (800 ms) after; a
// rejoin takes a few more beats. [Cluster.Kill] ends the node's database
// session too, so a peer that saw it hold its session lock evicts it
// once its beat is a quarter Interval late (97-133 ms after the kill on
// SQLite, PostgreSQL and MariaDB, measured once; in memory, 54 ms in
// virtual time: TestKillEndsTheSession); a node killed before its peers
// saw its lock held is evicted after EvictAfter. [Cluster.Stop] and
// [Cluster.Drop] act at once. The faults act on each node's own view of
// the store: while a node is cut off, its store calls fail with
// [ErrUnreachable] and its beats age in the database, so its peers evict
// it and its fence claims stop holding; the pool of its services stays
// open, so a handler still running on a killed node may try to commit,
// and the fence refuses it.
//
// # Random faults, checked histories
//
// Package service/servicetest/chaos injects faults into a cluster at
// random from a seed ([Cluster.Kill], Stop, StopHeartbeat, Partition,
// Drop and [Cluster.Pause]), records what clients invoked and got, and
// checks each resource's history for linearizability.
//
// # Network faults against real servers
//
// Package service/servicetest/proxy is a TCP proxy a test puts between
// its code and a real broker or database, to cut, stall and heal that
// test's connections alone.
package servicetest

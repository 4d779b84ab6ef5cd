// Package heartbeat is the membership of the management nodes: each node
// beats in a shared [Store], and its [Monitor] evicts the nodes that stop
// beating and reports changes to a [Listener]. Design and figures:
// docs/design.md, "Heartbeats and eviction".
//
// [Monitor.Join] registers the node (a new epoch) and returns the
// members; [Monitor.Run] loops every Interval: beat, list, evict, report;
// [Monitor.Leave] deregisters, so peers report Left at once.
//
// # Timing
//
// With interval H, lease L and threshold E ([Config]): a dead node is
// evicted E to E+H after its last beat; a node whose beats have not
// landed for L has its lease expire ([Monitor.LeaseExpired]), at least E-L before a peer
// may evict it.
//
// # Eviction rules
//
// A monitor evicts a record only if rules 1-4 hold, or rule 5:
//
//  1. It is not its own record.
//  2. The record is older than E by the store's clock.
//  3. The monitor has listed it unchanged for E-H by its own clock.
//  4. The monitor's beats succeeded this round and the two before, at
//     most 2H apart.
//  5. The record's bus has been down for BusDownAfter, the monitor's
//     beats are healthy as in rule 4, and its own bus has been up for
//     BusSettle.
//
// # Cluster time
//
// The store's clock is the cluster clock that deadlines are written in.
// A monitor reads it at [Monitor.SyncClock], Join and every few rounds,
// and estimates this node's offset to it ([Monitor.ClusterTime]).
//
// # Events and shutdown
//
// Run reports [Joined], [Left], [Evicted] and [SelfEvicted], Left and
// Evicted first in a round. Cancel Run's context then call Leave, or call
// Leave while Run runs; Run returns nil and no event follows Leave.
//
// heartbeat/memstore keeps records in memory, with an injectable clock
// and per-node faults, for tests under testing/synctest.
package heartbeat

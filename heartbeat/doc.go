// Package heartbeat is the membership of the management nodes: each node
// writes a heartbeat record to a shared database, watches the others'
// records, evicts the nodes that stop beating, and tells its owner (the
// node's service layer, which updates the consistent-hash ring and
// broadcasts lifecycle events) what changed.
//
// There is no membership protocol between the nodes and no leader: the
// database is the only shared state, as in ZStack, where every management
// node writes a heartbeat row and any node may delete the row of a node
// that stopped beating. The package does not depend on the bus; the
// service layer connects the two.
//
// # Design
//
// A [Store] holds one [Record] per live node: its UUID, the epoch of its
// current life, a beat sequence number and the time of its last beat. A
// [Monitor] per node drives the protocol over the store:
//
//   - [Monitor.Join] registers the node (a new epoch) and returns the
//     current members, the baseline for later events.
//   - [Monitor.Run] loops every Interval: beat (restamp its own record),
//     list every record, evict the stale ones (a conditional delete), and
//     report the differences to a [Listener].
//   - [Monitor.Leave] deletes the node's record: a goodbye, so peers
//     report the node as Left at once instead of evicting it later.
//
// # The store contract
//
// Every time is the store's: Register and Beat stamp the store's clock
// and List reports each record's age by it, so skewed node clocks cannot
// make a healthy node look stale (a SQL store computes ages on the
// database server's current clock: clock_timestamp() on PostgreSQL, not
// now(), which is the transaction's start; see heartbeat/sqlstore).
// Every write is one conditional statement:
//
//   - Beat succeeds only if the record exists with the caller's epoch;
//     otherwise it returns [ErrEvicted] and changes nothing, so a node
//     that was evicted learns it at its next beat and cannot resurrect
//     its record.
//   - Evict(node, epoch, seq) deletes the record only if it still has the
//     epoch and sequence the evictor listed. A node that beat since the
//     List has a new sequence and is never evicted, and of several nodes
//     evicting the same record exactly one is told it succeeded: that one
//     reports [Evicted] and broadcasts the leave.
//   - Register gives a new epoch on every call, so a restarted node is a
//     new life: the old life's beats fail and peers see Left then Joined.
//   - Deregister deletes only the caller's epoch, and is idempotent.
//
// Implementations run the conformance suite in heartbeat/storetest; the
// in-memory store is heartbeat/memstore.
//
// # Timing
//
// With beat interval H ([Config.Interval]) and eviction threshold E
// ([Config.EvictAfter]), a node that dies is evicted between E and E+H
// after its last successful beat: its record turns E old, and the next
// round of any peer (rounds are spread over the interval by a random
// initial delay) evicts it. The other peers report Left at their next
// round. A node with a working store connection is evicted only if none
// of its beats reached the store for E, that is about E/H consecutive
// beats.
//
// [DefaultConfig] beats every 500 ms, fences a node after 2 s without a
// beat (the lease, [Config.Lease]) and evicts after 3 s, so a dead node
// is evicted 3-3.5 s after its last beat and five consecutive lost or
// slow beats are tolerated. For comparison: ZStack beats every 5 s and
// evicts after about 35-40 s, leaving a dead node's resources orphaned for
// over half a minute; Akka's default failure detector needs about 25 s;
// Dapr's placement service fails over in about 3-5 s. Two small UPDATEs
// per node per second are a trivial load for a database. What makes so
// short a threshold safe is the lease: a node whose beats stop landing
// fences itself ([Monitor.Fenced]: it stops handling resource messages)
// at least EvictAfter-Lease before any peer may evict it, and a store
// outage seen by everyone evicts nobody (rule 4 below).
// [LocalConfig] (50 ms / 200 ms / 300 ms) is for tests and demos in one process.
// OpTimeout bounds each store call (default: Interval), so a hung
// database costs a round, never the loop.
//
// A beat that waits for a connection waits inside its OpTimeout: give a
// SQL store a connection pool of its own, never the application's
// (heartbeat/sqlstore, "A pool of its own"). A node whose database link
// was slowed to 100-150 ms per round trip, its one pool full of record
// transactions, was evicted 4.2-4.6 s after the slowdown though the
// database answered each beat in 200-300 ms; on a pool of its own its
// beats took about 130 ms (p50), none missed its timeout, and nobody was
// evicted. A node whose database answers its beats within OpTimeout is
// never evicted.
//
// # Eviction safety
//
// A monitor evicts a record only if all of these hold:
//
//  1. It is not its own record: a node never evicts itself.
//
//  2. The record's age, by the store's clock, exceeds EvictAfter.
//
//  3. The monitor has itself listed the record unchanged (same epoch and
//     sequence) for at least EvictAfter-Interval, by its own clock. A
//     live node changes its sequence every Interval, so a jump of the
//     store's clock, which makes every record look old at once, evicts
//     nobody. In steady state this costs nothing: the record's age passes
//     E first.
//
//  4. The monitor's own beats succeeded in this round and in the two
//     rounds before it, with no more than 2×Interval between consecutive
//     rounds. A node cut off from the store evicts nobody (its beats
//     fail), and a node whose loop stalled (a long pause, a blocked
//     listener) starts counting again.
//
//  5. Or, for a record that still beats: the record has reported its
//     node's message bus down ([Store.BeatBus], [Monitor.SetBusUp]) for
//     longer than BusDownAfter (default: the lease, 2 s), this monitor's
//     beats are healthy as in rule 4, and its own bus is up and has been
//     for at least BusSettle (default 2×EvictAfter, 6 s). A node cut off
//     from the bus while its database is fine (a zombie: it beats, but no
//     message reaches it) is thus evicted by a peer BusDownAfter after
//     its first beat reporting the bus down, plus up to two intervals:
//     about 2.5-3 s after it lost the bus with the defaults, its callers'
//     calls ending with node_left. A bus outage every node saw evicts
//     nobody: no monitor whose bus is down evicts for the bus, and the
//     first whose bus comes back waits BusSettle, time for the others to
//     reconnect (a transport retries at least every 2.4 s) and beat
//     again. A node whose bus stays down past that is evicted.
//
// Rule 4 gives this guarantee after an outage that every node saw (a
// database restart or failover): once the store is back, each live node
// sends a beat at its next tick, within one Interval; a monitor evicts
// no earlier than its third successful round, at least two Intervals
// after the store came back. Every live node has therefore beaten at
// least once, with an Interval to spare for that beat's latency, before
// anyone evicts, and nobody is evicted by the outage. A node that did
// not come back is evicted within E+H of its last beat or of the store's
// return, whichever is later. Requiring only two successful rounds would leave
// no margin: a node whose tick fell just before the store came back beats
// one Interval later, at the same moment its peer evicts.
//
// A node whose own beats fail does not know whether it has been evicted.
// [Monitor.LastBeat] is the local time at which its last successful beat
// was sent; a node that has not beaten successfully for EvictAfter must
// assume it was evicted and stop serving (self-fencing) before a peer
// takes over its resources.
//
// # Cluster time and deadlines
//
// The store's clock is also the cluster's clock: the one every deadline
// is written in (message.Envelope.Deadline), so that a message that
// waited anywhere, for any reason, is known to be late when it is
// finally read. The store tells its time ([Store.StoreTime]); the
// monitor reads it at Join (or before, with [Monitor.SyncClock], which a
// node calls before it takes any message) and after every successful
// beat, and keeps an
// estimate of this node's offset to it ([ClockSync],
// [Monitor.ClusterTime]), the rules being:
//
//  1. A reading sent at local time s and answered at local time r lies
//     between them: the offset is (store time) - (s+r)/2, known to within
//     e = (r-s)/2 plus the store clock's resolution (1 µs on PostgreSQL
//     and MySQL, 1 ms on SQLite).
//  2. Of the readings of the last minute (at most 16) the one with the
//     smallest bound wins, its bound grown by 200 ppm of its age
//     ([MaxClockDrift]): a slow reading (a busy database, a pause in
//     between) never spoils a fast one. After a minute without a reading
//     the cluster time is unknown, and a node's messages carry only the
//     time left.
//  3. With the defaults (a beat every 500 ms) and a 2 ms round trip to
//     the database, the bound is about 1 ms; [MaxClockError] (50 ms) is
//     the bound a node should reach, and Join logs the measured offset
//     and bound ("cluster clock measured": clock_offset, clock_error), at
//     warning level above 50 ms.
//  4. Node clocks may be off by any amount: only each node's measured
//     offset matters, and only durations between readings of its own
//     clock ([Config.Now]). A process paused between s and r gives a
//     large bound, which rule 2 discards.
//
// A sender writes its deadline as (cluster time now) + (time left) -
// (its bound); a receiver refuses a message once (cluster time now) +
// (its bound) reaches it. So no message starts after its caller's
// deadline, whatever the clock errors, as long as the bounds hold; the
// price is starting at most the two bounds early (about 2 ms). The
// receiver checks just before the handler starts, so the remaining gap
// is the scheduling between that check and the handler's first line.
//
// # Events
//
// Run reports [Joined] (a new record, or a new epoch of a known node),
// [Left] (a record vanished: a goodbye or an eviction by another node, or
// was replaced by a new epoch), [Evicted] (this monitor's Evict deleted
// the record; the node should broadcast the leave) and [SelfEvicted]
// (this node's record is gone or has another epoch; Run then returns
// ErrEvicted and the node must stop serving). Within one round Left and
// Evicted come before Joined, so a re-registered node is reported as Left
// for the old epoch, then Joined for the new one. A stale record not yet
// evicted is still a member. The [Listener] is called in Run's goroutine,
// one event at a time; it must not block for long.
//
// # Shutdown
//
// The node either cancels Run's context and then calls Leave, or calls
// Leave while Run runs; Leave stops Run, waits for it, then deregisters.
// Either way no SelfEvicted is reported for the goodbye, Run returns nil
// and no event follows Leave's return. A node that crashes without Leave
// is evicted after EvictAfter.
//
// # Testing with memstore and synctest
//
// heartbeat/memstore keeps the records in memory. Its clock can be
// injected, and [memstore.Store.For] gives each node a view that
// [memstore.Store.SetUnreachable] can cut off (the node stops beating
// without a goodbye) or [memstore.Store.SetLatency] can slow down. Run
// monitors on it inside testing/synctest and the timing is exact and
// instant:
//
//	synctest.Test(t, func(t *testing.T) {
//		s := memstore.New(memstore.Config{})
//		// Join and Run a Monitor per node on s.For(node) ...
//		s.SetUnreachable(c, true) // c stops beating, no goodbye
//		time.Sleep(cfg.EvictAfter + cfg.Interval)
//		synctest.Wait()
//		// exactly one peer reported Evicted for c, the other Left
//	})
//
// [memstore.Store.SetUnreachable]: https://pkg.go.dev/github.com/cloudbus-go/cloudbus/heartbeat/memstore#Store.SetUnreachable
// [memstore.Store.SetLatency]: https://pkg.go.dev/github.com/cloudbus-go/cloudbus/heartbeat/memstore#Store.SetLatency
// [memstore.Store.For]: https://pkg.go.dev/github.com/cloudbus-go/cloudbus/heartbeat/memstore#Store.For
package heartbeat

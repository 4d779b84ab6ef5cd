// Package fence makes ownership authorize writes, and makes messages
// idempotent, in the user's own database transactions.
//
// The ring routes a message to the node that owns its resource; it does
// not stop a node that lost ownership from writing. A handler already
// running when peers evicted its node, or a process paused between its
// check and its write, could otherwise write after a new owner took the
// resource over. A fence stops that write in the database itself.
//
// # Claims and tokens
//
// A [Claim] is a node's claim to write one resource: the resource, the
// node's UUID and the epoch of the node's current life (its membership
// record in the heartbeat store). service.Node puts its claim on the
// message's resource in every handler's ctx; [ClaimFrom] or [For] takes
// it out.
//
// A claim holds while the node's record is live: present, with that
// epoch, and beating (younger than the fence's MaxAge by the database's
// clock). Peers evict a node only after its record stopped beating, so
// once a resource can have a new owner, every claim of the old one fails.
//
// Each resource has a [Token] in the database: it moves to a claimant
// when the claimant's check succeeds, and increases by one each time the
// claimant changes. The check (sqlfence.Fence.Check) is one conditional
// UPDATE in the user's transaction: it moves the token only if the
// claimant's record is live, and it holds the token row's lock until the
// transaction ends, so no other claimant can take the resource between
// the check and the commit. A claim that does not hold fails with a
// [*StaleError], which matches [ErrStale] and message.ErrNotOwner (retry
// on the current owner: service.Node.Call re-routes it) and means nothing
// was written.
//
// Claims are lazy: a node taking over a third of the key space does no
// store work at takeover; the first write of each resource moves its
// token in the statement that checks it (a first-ever write inserts the
// row). Every fenced transaction costs two extra statements (one on
// SQLite) and holds the resource's token row until it ends.
//
// # Isolation
//
// A plain SELECT of a token fences nothing: under PostgreSQL's READ
// COMMITTED and MariaDB's REPEATABLE READ it reads a snapshot that may be
// older than the eviction. The conditional UPDATE is the check:
//
//   - PostgreSQL, MySQL and MariaDB: the token row is locked first
//     (SELECT … FOR UPDATE), then the UPDATE reads the claimant's record
//     in a statement that starts after the lock was granted, so a
//     claimant evicted while it waited for the lock is refused. Run
//     fenced transactions at READ COMMITTED (PostgreSQL's default;
//     sqlfence.Fence.Do begins them so on MySQL and MariaDB, whose
//     default is REPEATABLE READ), so that each statement reads the
//     latest committed record, Verify included, without locking it.
//     Under REPEATABLE READ on MySQL the check is still safe (InnoDB
//     then reads the record with a shared lock) but the claimant's beats
//     wait for the transaction (see "Writes, not liveness"), and Verify
//     reads the transaction's snapshot.
//   - SQLite: transactions must begin with BEGIN IMMEDIATE (_txlock=immediate,
//     as sqlstore.Open sets), so the check runs under the write lock.
//
// A process paused inside a fenced transaction keeps the token row locked,
// and the new owner's first write of that resource waits for it. Bound
// that wait at the database: set PostgreSQL's
// idle_in_transaction_session_timeout, or MariaDB's
// idle_transaction_timeout, to the eviction threshold (EvictAfter) or
// less, and keep each gap between a transaction's statements (a
// hypervisor call inside it) shorter than that; the database then ends
// the paused transaction, and when the process resumes its next
// statement fails and the fence reports a [*StaleError]. refnode serve
// sets PostgreSQL's and MariaDB's from -evict-after. MySQL has no such
// setting: there innodb_lock_wait_timeout (50 s by default) bounds the
// new owner's wait.
//
// # Side effects outside the database
//
// The fence guards the transaction's writes, not what the handler does
// outside the database meanwhile. Call Verify (sqlfence.Fence.Verify)
// just before such a side effect (a hypervisor call): a node that
// stalled after its check while peers evicted it learns it before it
// acts. That leaves only the time between Verify and the side effect;
// pass the [Token] to systems that can refuse a lower one to close it,
// or make those calls idempotent and let the owner reconcile them from
// the truth (refnode's VM sweeper does, from the hypervisor's power
// states).
//
// A side effect that succeeded while the write recording it failed
// leaves the record behind what happened: the database link dropped, the
// commit's outcome was lost, or the node was paused past its eviction
// and its write was refused as stale. Repairing that record is a write
// like any other: fenced by the repairing node's claim, and ordered
// against every write of the resource acknowledged since. The rules, for
// a record that carries a version (a number every committed update of
// the record increases, and a failed transaction leaves as it was):
//
//  1. Record the version you saw. The failed transaction read the record
//     before it acted: journal the outcome with that version, its base
//     ([Journal.Record]). A later write of the resource by this node that
//     commits supersedes the entry ([Journal.Forget]).
//
//  2. Reconcile only forward. A repair runs in a fenced transaction: it
//     reads the record, takes its evidence (the other system's state,
//     read then, inside the transaction; or a journal entry), and writes
//     only if the record is still at the version it read, a
//     compare-and-set in the update. A repair never moves a record that
//     a write acknowledged after its evidence was taken changed.
//
//  3. A journal entry whose base is not the record's current version is
//     dropped ([Journal.Check] returns [EntryStale] and counts it; a node
//     that reads the record outside a repair, listing records it does not
//     own, drops the entries a version above their base overtook with
//     [Journal.Overtaken]). A
//     write was acknowledged after the failed one read the record, and
//     the record says what that write's caller was told; applying the
//     entry would undo it. (The lost write this rule prevents: a node
//     paused past its eviction after its hypervisor started a VM, whose
//     final write was then refused; the new owner started and stopped
//     the VM, both acknowledged; the old node rejoined, owned the VM
//     again, and "repaired" it to running from its journal.)
//
//  4. What the other system reports wins where it can be known: where it
//     reports the resource's state, the repair reads it at the moment of
//     the repair and records that (and forgets the journal entry). Where
//     it cannot tell, a repair may only apply a journal entry whose base
//     is still current: with nothing written since, the node's own side
//     effect is the last thing known to have happened. Two unrecorded
//     side effects on different nodes (two failed writes that read the
//     same version) cannot be ordered by their journals; only the other
//     system's truth can.
//
//  5. The journal is in memory. The failure that makes a node journal is
//     usually the database itself (a cut link, a transaction the server
//     ended while the node was paused), so an entry written there would
//     fail with the write. A crash loses the entries: the record then
//     stays behind the side effect until the other system tells the
//     truth or an operator acts. A record behind the truth is the safe
//     failure; a record that overwrote an acknowledged write is not.
//
// [Journal] is rules 1 and 3 for any kind of outcome: refnode's VM
// service journals the state its hypervisor put a VM in, with the VM
// record's version, and its sweeper applies an entry only at that
// version.
//
// # Creations
//
// A creation message runs on the node that received it (the article's
// rule), not on the new resource's owner, so it is not fenced: its insert
// of a new row cannot overwrite another owner's state (a second insert of
// the same key fails), and its [Key] stops a redelivery from creating
// twice. Every later write of the resource goes to its owner and is
// fenced there.
//
// # Idempotent messages
//
// A [Key] is a message's id, type and body hash. The fence records it in
// the handler's transaction before any side effect, with the first
// reply: a later delivery of the same message (a broker redelivery, a
// drained queue, a retry with bus.WithRetry) gets the first reply without
// running; a delivery running at the same time, on another node, waits
// for the first and then gets its reply; an id reused for a different
// message fails with [ErrKeyReused] (a bad_request). If the handler fails,
// nothing is recorded and the next delivery runs again. Records are kept
// for a retention window (default a day) and bounded in size (default 1
// MiB per reply); both are configurable.
//
// # Writes, not liveness
//
// A check decides whether one write commits, never whether a node is
// live: it reads the claimant's heartbeat record inside the user's
// transaction, on the user's connection, and a check that is slow or
// refused fails that write ([*StaleError], or the database's error) and
// nothing else. Liveness is decided only by the heartbeat monitor's own
// beats and lists; no fence statement writes a heartbeat record or
// evicts anyone. So the fence's statements go with the user's records,
// on their pool, and the heartbeat store keeps a pool of its own
// (heartbeat/sqlstore, "A pool of its own"): a beat never waits for a
// connection behind fenced transactions.
//
// No check locks the claimant's heartbeat record, so a node's beat never
// waits for its own open fenced transactions: at READ COMMITTED the
// check and Verify read the record without a lock. At REPEATABLE READ,
// MySQL's default, InnoDB would read it with a shared lock held until the
// transaction ends, and the node's next beat (an UPDATE of that record)
// would wait for it: measured on MariaDB 10.11, a beat sent while such a
// transaction was open missed its 500 ms timeout; at READ COMMITTED it
// takes milliseconds, as on PostgreSQL (refnode's
// TestBeatsDuringFencedTransactions). sqlfence.Fence.Do begins its
// transactions at READ COMMITTED; a transaction of your own that calls
// sqlfence.Fence.Check should too. On SQLite every writing transaction
// holds the file's one write lock, which a beat needs too: keep fenced
// transactions there much shorter than the heartbeat's OpTimeout, or
// prefer PostgreSQL.
//
// # Implementations
//
// Package fence/sqlfence works in SQL transactions on SQLite, PostgreSQL
// and MySQL/MariaDB, in the heartbeat store's database; package
// fence/memfence is its in-memory twin for tests. Both pass the
// conformance suite in fence/fencetest.
package fence

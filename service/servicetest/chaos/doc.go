// Package chaos checks a user's services under faults: a seeded
// [Nemesis] injects faults into a servicetest cluster (kills, stops,
// heartbeat cuts, partitions, dropped traffic, pauses, store outages,
// clock offsets), a [Recorder] records
// what concurrent clients invoked and how each call ended, and [Check]
// proves every resource's history linearizable with porcupine
// (github.com/anishathalye/porcupine) against a sequential model: one of
// the ready ones ([Register], [Counter], [Set]) or one built with
// [Model] from the user's own step function.
//
// Inside testing/synctest, with a cluster in memory, heartbeats,
// evictions and the nemesis's pauses take virtual time: thousands of
// operations under hundreds of faults run in seconds.
//
// # Outcomes
//
// Each call ends one of three ways ([Recorder.End] sorts an error by its
// code's retry class, message.Retry):
//
//   - ok: the reply says what happened; the model must produce that
//     output at one instant between the invocation and the reply;
//   - failed: a coded error saying it did not run (message.RetrySafe,
//     RetryNever: not_owner, busy, bad_request, ...); it is left out of
//     the history: had it run after all, a read of its effect would come
//     from nowhere;
//   - unknown: anything else (a timeout, node_left, internal): it may
//     have taken effect at any instant from its invocation up to its
//     caller's deadline, or never. An operation that takes effect after
//     its caller's deadline (a late execution) is caught once a later
//     read shows it.
//
// [Recorder.Overdue] counts the calls whose caller did not learn their
// outcome by its deadline.
//
// # The audit
//
// Beside the histories, [Recorder.Audit] counts Jepsen-style anomalies
// from the commits the service reports ([Recorder.Commit], keyed by
// message id: send each operation with bus.WithID([Recorder.ID])), each
// kind apart, each 0 in a correct run: acknowledged writes lost, writes
// committed twice, committed though refused, committed under no
// operation's id, committed after their caller's deadline (late), a
// write of the past landing over a newer one (stale), and calls
// overdue. The commits come from the handlers as they commit, or from
// an end-state read of the store after the run.
//
// # What a history catches
//
// With a unique value per write, a register's history shows an
// acknowledged write lost (a later read returns an older value), a write
// applied twice (its value comes back after a later write), a stale
// write applied (a compare-and-set that swapped from a value the
// register no longer held) and a stale read. A failing [Check] names the
// resource, the seed to repeat it with, and writes porcupine's
// visualization (an HTML file) for it.
package chaos

// Package chaoscheck checks the histories of chaos tests for
// linearizability with porcupine (github.com/anishathalye/porcupine): a
// [Recorder] records what concurrent clients invoked and what came back,
// and [Register] is the sequential specification of one register with
// reads, writes and compare-and-set; [VM] is that of one VM, refnode's
// state machine (cloud.Transition) with reads of its state. A history is
// linearizable if every
// operation can be placed at one instant between its invocation and its
// return so that, in that order, each one returns what the register
// would. The [Recorder] is the SDK's (package service/servicetest/chaos,
// the chaos kit for users' services) on one resource; the models keep
// this package's outputs, whose Unknown flag refnode's process tests
// record. The in-memory tests of package services record with the kit's
// chaos.Recorder directly and check with chaos.Check: an image's names
// against the kit's chaos.Register, a VM's history against [VMModel],
// the [VM] model built with chaos.Model.
//
// The chaos test of refnode runs SetImageName (a write, or with if_name a
// compare-and-set) and GetImage (a read) on a few images from several
// clients while nodes are killed, partitioned and cut off, and checks
// each image's history. The issue it answers: "linearizable per resource,
// nothing lost, no late or double execution". With unique write values
// the register catches each of those:
//
//   - lost: a write that returned success must take effect, so a later
//     read of an older value is refused;
//   - double execution: a write that takes effect twice brings its value
//     back after a later write; a read of it then is refused;
//   - late execution: see below;
//   - not linearizable: a read of a value no write put there, a
//     compare-and-set that swapped from a value the register did not
//     hold, a stale read after a newer value was read.
//
// The repair test of refnode checks one VM's history the same way: a
// StartVm whose node was paused past its eviction (unknown outcome), a
// start and a stop acknowledged by the new owner, and reads of the
// record; a repair that brought the paused node's start back after the
// stop makes it illegal.
//
// # Unknown outcomes
//
// A call that ends without a reply saying what happened (timeout,
// node_left, internal: message.RetryUnknown) may or may not have taken
// effect. [Recorder.Unknown] records it as returning at the caller's
// deadline with an unconstrained result: the model lets it take effect
// at any instant up to the deadline, or never. This is stricter than
// porcupine's usual infinite return time: an operation that takes effect
// after its caller's deadline (a late execution) makes the history
// illegal as soon as another operation completes in between and a read
// shows it. A call refused before it ran (not_owner, busy, bad_request, conflict:
// message.RetrySafe and RetryNever) is recorded with [Recorder.Fail] and
// left out: had it run after all, a read of its value would come from
// nowhere.
//
// # Time
//
// Each event is stamped with the clock given to [NewRecorder] and an
// order counter, so that events at one instant (usual in a
// testing/synctest bubble, where the clock stands still while goroutines
// run) keep the order in which they happened. An operation precedes
// another only if its return was recorded before the other's invocation,
// which is the real-time order linearizability asks to respect.
package chaoscheck

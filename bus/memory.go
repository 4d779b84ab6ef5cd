package bus

import (
	"runtime/debug"
	"time"
)

// Returning the memory of large messages to the operating system.
//
// A control plane's messages are small; a large one (up to
// Config.MaxMessageSize, or a longer one the transport cut short) is
// usually a mistake or hostile, and a burst of them leaves the process
// holding the heap they needed: Go's runtime gives freed pages back to
// the system slowly, over minutes. After a delivery of at least
// largeBody bytes the bus returns what is free at once
// (debug.FreeOSMemory: a garbage collection and a scavenge), releaseDelay
// later and at most once per releaseEvery, so that a node's memory goes
// back to its baseline within seconds of the burst (TestHostileInput in
// refnode measures it). The release is armed when a large delivery has
// been taken or refused, and again when its handling ends: a release
// that ran while a slow handler still held the body would otherwise be
// the last, and an idle process could keep the heap until the runtime's
// next forced collection, two minutes later. Small messages never
// trigger it.
const (
	largeBody    = 1 << 20
	releaseDelay = time.Second
	releaseEvery = 5 * time.Second
)

// noteSize is told the size of every delivery the bus takes, when it is
// taken or refused and when its handling ends.
func (b *CloudBus) noteSize(n int) {
	if n < largeBody {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.freeTimer != nil {
		return
	}
	wait := max(releaseDelay, time.Until(b.lastRelease.Add(releaseEvery)))
	b.timers.Add(1)
	b.freeTimer = time.AfterFunc(wait, func() {
		defer b.timers.Done()
		debug.FreeOSMemory()
		b.mu.Lock()
		b.freeTimer, b.lastRelease = nil, time.Now()
		b.mu.Unlock()
	})
}

// stopRelease cancels a pending release; Close calls it.
func (b *CloudBus) stopRelease() {
	b.mu.Lock()
	t := b.freeTimer
	b.freeTimer = nil
	b.mu.Unlock()
	if t != nil && t.Stop() {
		b.timers.Done()
	}
}

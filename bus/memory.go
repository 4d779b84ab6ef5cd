package bus

import (
	"runtime/debug"
	"time"
)

// After a delivery of at least largeBody bytes is taken or refused, and
// again when its handling ends, the bus returns free memory to the system
// releaseDelay later, at most once per releaseEvery (docs/design.md,
// "Delivery rules").
const (
	largeBody    = 1 << 20
	releaseDelay = time.Second
	releaseEvery = 5 * time.Second
)

// noteSize arms the release for a delivery of n bytes.
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

// stopRelease cancels a pending release.
func (b *CloudBus) stopRelease() {
	b.mu.Lock()
	t := b.freeTimer
	b.freeTimer = nil
	b.mu.Unlock()
	if t != nil && t.Stop() {
		b.timers.Done()
	}
}

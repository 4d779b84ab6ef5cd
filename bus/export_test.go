package bus

import "time"

// MemoryReleasePending reports whether a return of memory to the OS is
// armed (memory.go).
func (b *CloudBus) MemoryReleasePending() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.freeTimer != nil
}

// ValidReplyTo exposes CloudBus.validReplyTo to the package's tests.
func ValidReplyTo(b *CloudBus, addr string) bool { return b.validReplyTo(addr) }

// SetSpillCooldown sets how soon api.portal's added consumers may be
// removed (spill.go), and returns a function that restores it. Tests
// that call it must not run in parallel.
func SetSpillCooldown(d time.Duration) (restore func()) {
	old := spillCooldown
	spillCooldown = d
	return func() { spillCooldown = old }
}

// PortalConsumers is the most consumers a bus keeps on api.portal.
const PortalConsumers = portalConsumers

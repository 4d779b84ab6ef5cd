package bus

// MemoryReleasePending reports whether a return of memory to the OS is
// armed (memory.go).
func (b *CloudBus) MemoryReleasePending() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.freeTimer != nil
}

// ValidReplyTo exposes CloudBus.validReplyTo to the package's tests.
func ValidReplyTo(b *CloudBus, addr string) bool { return b.validReplyTo(addr) }

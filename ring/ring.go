package ring

// Ring maps keys to the member that owns them. Every management node keeps
// its own Ring holding the live node UUIDs; a message about a resource goes to
// Locate(resourceUUID).
//
// Implementations must be safe for concurrent use by multiple goroutines:
// Locate, Members and Fingerprint may run while Add and Remove run. No method
// blocks on I/O. Two rings of the same implementation and configuration that
// hold the same members must locate every key to the same member, whatever
// order the members were added in, so independent nodes agree on owners.
// The package ring/ringtest checks all of this; every implementation should
// run it.
type Ring interface {
	// Add adds member to the ring. It returns an error wrapping
	// ErrInvalidMember for the empty name and ErrMemberExists if member is
	// already present; the ring is then unchanged.
	Add(member string) error

	// Remove removes member from the ring. It returns an error wrapping
	// ErrMemberNotFound if member is absent; the ring is then unchanged.
	Remove(member string) error

	// Locate returns the member that owns key. It returns ErrEmpty if the
	// ring has no members. Keys are hashed exactly as given (callers pass
	// canonical UUID strings). Locate must not allocate.
	Locate(key string) (string, error)

	// Members returns the current members sorted in increasing order. The
	// slice is a fresh copy owned by the caller, who may modify it.
	Members() []string

	// Fingerprint identifies the current membership. It must equal
	// FingerprintOf(Members()), so nodes can compare rings cheaply.
	Fingerprint() Fingerprint
}

// Replacer is an optional interface for a [Ring] that can replace its whole
// membership in one step, cheaper than one Add or Remove per change and
// without exposing intermediate memberships to concurrent Locate calls. [Sync]
// uses it when the ring implements it.
//
// Replace makes the membership equal to the distinct, non-empty names in
// members. Empty names are skipped and reported by an error wrapping
// ErrInvalidMember; the other names are still applied. If the result cannot be
// held (ErrTooManyMembers) the ring is left unchanged. Replace must not retain
// or modify members. It is safe for concurrent use like the rest of Ring.
type Replacer interface {
	Ring
	// Replace makes the membership equal to members in one step (see above).
	Replace(members []string) error
}

package ring

// Ring maps keys to the member that owns them, following the package's
// rules. No method blocks on I/O.
type Ring interface {
	// Add adds member. It returns an error wrapping ErrInvalidMember for
	// "" or ErrMemberExists.
	Add(member string) error

	// Remove removes member, or returns an error wrapping
	// ErrMemberNotFound.
	Remove(member string) error

	// Locate returns the member that owns key, hashed as given, or
	// ErrEmpty. It must not allocate.
	Locate(key string) (string, error)

	// Members returns the members sorted, in a copy the caller owns.
	Members() []string

	// Fingerprint returns FingerprintOf(Members()).
	Fingerprint() Fingerprint
}

// Replacer is a [Ring] that can replace its membership in one step; [Sync]
// uses it when a ring implements it.
type Replacer interface {
	Ring
	// Replace makes the membership the distinct non-empty names in members,
	// in one step, without keeping or modifying members. It skips empty
	// names and reports them with ErrInvalidMember; on ErrTooManyMembers
	// the ring is unchanged.
	Replace(members []string) error
}

package ring

import "errors"

// ErrEmpty is returned by [Ring.Locate] when the ring has no members, so no
// node owns any key. Nothing happened; retry after a member has been added
// (for a node, after its membership store reports at least one live node).
var ErrEmpty = errors.New("ring: no members; add at least one member before locating keys")

// ErrInvalidMember is returned by [Ring.Add] (and by [Sync] and
// [Replacer.Replace] for the offending entry) when the member name is empty.
// Nothing happened; retrying with the same name fails again: pass a
// non-empty name, normally a canonical node UUID.
var ErrInvalidMember = errors.New("ring: invalid member; member names must be non-empty (use the node UUID)")

// ErrMemberExists is returned by [Ring.Add] when the member is already in the
// ring. Nothing changed; the ring already holds the member, so callers that
// reconcile membership may treat it as success (or use [Sync]).
var ErrMemberExists = errors.New("ring: member already present; remove it first or use ring.Sync to reconcile")

// ErrMemberNotFound is returned by [Ring.Remove] when the member is not in the
// ring (the empty name is never a member). Nothing changed; callers that
// reconcile membership may treat it as success (or use [Sync]).
var ErrMemberNotFound = errors.New("ring: member not found; check Members() or use ring.Sync to reconcile")

// ErrTooManyMembers is returned when adding a member would exceed what the
// ring's configuration can hold: more than [MaxMembers] for a [Table], or more
// members than a [Consistent] ring's partitions and load factor can place.
// Nothing changed; retrying fails again until members are removed or the ring
// is rebuilt with a larger configuration.
var ErrTooManyMembers = errors.New("ring: too many members for this ring's configuration; raise the partition count (or load) or remove members")

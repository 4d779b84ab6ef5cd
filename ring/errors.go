package ring

import "errors"

// ErrEmpty is returned by [Ring.Locate] on a ring with no members. Retry
// once a member was added.
var ErrEmpty = errors.New("ring: no members; add at least one member before locating keys")

// ErrInvalidMember is returned for an empty member name; nothing changed.
// Retrying with the same name fails again.
var ErrInvalidMember = errors.New("ring: invalid member; member names must be non-empty (use the node UUID)")

// ErrMemberExists is returned by [Ring.Add] for a present member; nothing
// changed. A reconciler may treat it as success.
var ErrMemberExists = errors.New("ring: member already present; remove it first or use ring.Sync to reconcile")

// ErrMemberNotFound is returned by [Ring.Remove] for an absent member;
// nothing changed. A reconciler may treat it as success.
var ErrMemberNotFound = errors.New("ring: member not found; check Members() or use ring.Sync to reconcile")

// ErrTooManyMembers is returned when a ring's configuration cannot hold
// the members; nothing changed. Retrying fails until members are removed.
var ErrTooManyMembers = errors.New("ring: too many members for this ring's configuration; raise the partition count (or load) or remove members")

// Package ringtest is the conformance suite for [ring.Ring] implementations:
// every ring in cloudbus runs it, and so should yours.
//
//	func TestMyRing(t *testing.T) {
//		ringtest.Run(t, func(t *testing.T) ring.Ring { return myring.New() })
//	}
//
// [Run] checks, each in its own named subtest whose failure messages name
// the rule broken:
//
//   - Agreement: independent instances holding the same members, added in
//     any order (or with other members added and removed on the way), give
//     every key the same owner, so all nodes route alike.
//   - Ownership: every key is owned by a current member, and keys are
//     spread over all members.
//   - Movement: adding a member moves keys only to it, removing one moves
//     keys only away from it, and adding then removing a member restores
//     every owner.
//   - Fingerprint: equal memberships have equal fingerprints, across
//     instances and across implementations (it equals [ring.FingerprintOf]
//     and the default ring's), and different memberships differ.
//   - Errors: Locate on an empty ring returns [ring.ErrEmpty]; Add of a
//     present member [ring.ErrMemberExists]; Remove of an absent one
//     [ring.ErrMemberNotFound]; Add("") [ring.ErrInvalidMember]; failed
//     calls leave the ring unchanged; Members returns a sorted copy.
//   - Sync: [ring.Sync] reaches the requested membership, through
//     [ring.Replacer] when implemented and through Add/Remove otherwise.
//   - Concurrency: Locate, Members and Fingerprint from many goroutines while
//     Add and Remove run (run the suite with -race).
//   - Allocation: Locate allocates nothing.
//
// Differences between implementations are declared in [Features] and passed
// to [RunWithFeatures]; an implementation's own test never skips cases.
//
// Members and keys are deterministic seeded UUIDs from [UUIDs], so a failure
// reproduces exactly.
package ringtest

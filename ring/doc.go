// Package ring maps resources to the management node that owns them. Every
// node keeps its own [Ring] of live node UUIDs, and a message about a
// resource goes to Locate(resourceUUID). For the design and its
// measurements, see docs/design.md, "The ring".
//
// Every [Ring] follows these rules, which ring/ringtest checks:
//
//  1. Equal members give every key the same owner, whatever their order.
//  2. A failed Add or Remove changes nothing and returns a sentinel error.
//  3. Locate returns [ErrEmpty] on an empty ring, and never allocates.
//  4. Members returns a sorted copy that the caller owns.
//  5. Fingerprint equals [FingerprintOf] of the members.
//  6. All methods are safe for concurrent use.
//
// Rule 1 holds between rings of one implementation and configuration.
// [New] returns the default, a [Table]; [NewConsistent] wraps
// github.com/buraksezer/consistent. [Sync] reconciles a ring with a
// membership list.
package ring

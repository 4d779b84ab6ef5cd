package ringtest

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/ring"
)

// Features declares how an implementation departs from the strictest
// contract. The zero value is the strictest contract, which plain
// rendezvous or consistent hashing meets; [ring.Table] and
// [ring.Consistent] bound each member's load and declare ExtraMovement.
type Features struct {
	// ExtraMovement declares that a membership change may also move keys
	// between members that stay, as bounded-load rings such as
	// ring.Table and buraksezer/consistent do when the load bound cascades. The Movement
	// cases then log those stray moves instead of failing; every other rule
	// (new members gain keys, removed members lose all theirs, add then
	// remove restores every owner) still holds.
	ExtraMovement bool
}

// Run runs the whole conformance suite against the rings newRing returns,
// with the strictest contract (zero [Features]). newRing must return a new,
// empty ring each time it is called; it is called with the subtest's t, so it
// may register cleanups or fail the test.
func Run(t *testing.T, newRing func(t *testing.T) ring.Ring) {
	RunWithFeatures(t, newRing, Features{})
}

// RunWithFeatures is [Run] for an implementation that declares features.
func RunWithFeatures(t *testing.T, newRing func(t *testing.T) ring.Ring, f Features) {
	s := &suite{newRing: newRing, features: f}
	t.Run("Agreement", s.agreement)
	t.Run("Ownership", s.ownership)
	t.Run("Movement", s.movement)
	t.Run("Fingerprint", s.fingerprint)
	t.Run("Errors", s.errorCases)
	t.Run("Sync", s.syncCase)
	t.Run("Concurrency", s.concurrency)
	t.Run("Allocation", s.allocation)
}

// suite holds what the cases share.
type suite struct {
	newRing  func(t *testing.T) ring.Ring
	features Features
}

// Seeds of the deterministic members and keys.
const (
	memberSeed = 1
	extraSeed  = 2
	keySeed    = 3
	keyCount   = 10_000
)

// keys returns the keys the cases locate.
func keys() []string { return UUIDs(keySeed, keyCount) }

// build returns a new ring holding members, added in the order given.
func (s *suite) build(t *testing.T, members []string) ring.Ring {
	t.Helper()
	r := s.newRing(t)
	for _, m := range members {
		require.NoError(t, r.Add(m), "Add(%q) of a new member must succeed", m)
	}
	return r
}

// owners returns the owner of every key; every Locate must succeed and
// return a current member.
func owners(t *testing.T, r ring.Ring, keys []string) []string {
	t.Helper()
	members := r.Members()
	out := make([]string, len(keys))
	for i, k := range keys {
		o, err := r.Locate(k)
		require.NoError(t, err, "Locate(%q) on a ring with %d members must succeed", k, len(members))
		if _, found := slices.BinarySearch(members, o); !found {
			require.Failf(t, "every key must be owned by a current member",
				"Locate(%q) = %q, which is not in Members() %v", k, o, members)
		}
		out[i] = o
	}
	return out
}

// requireSameOwners fails unless two rings give every key the same owner.
func requireSameOwners(t *testing.T, rule string, want, got []string, keys []string) {
	t.Helper()
	for i := range keys {
		if want[i] != got[i] {
			require.Failf(t, rule, "key %q: owner %q in one ring, %q in the other", keys[i], want[i], got[i])
		}
	}
}

// sortedUUIDs returns UUIDs(seed, n), sorted.
func sortedUUIDs(seed uint64, n int) []string {
	return slices.Sorted(slices.Values(UUIDs(seed, n)))
}

// shuffled returns a copy of s in a deterministic scrambled order.
func shuffled(s []string) []string {
	out := slices.Clone(s)
	for i := range out {
		j := (i*7 + 3) % len(out)
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// Kind is a ring this module offers, by name, with its constructor.
type Kind struct {
	Name string           // "table" or "consistent"
	New  func() ring.Ring // a new empty ring of this kind
}

// Kinds returns the rings a node can use (service.Config.Ring): the
// default partition table and the buraksezer/consistent ring, each with its
// default configuration, so a test can run once per ring.
func Kinds() []Kind {
	return []Kind{
		{"table", func() ring.Ring {
			r, err := ring.New(ring.DefaultConfig())
			if err != nil {
				panic(err) // the defaults are valid
			}
			return r
		}},
		{"consistent", func() ring.Ring {
			r, err := ring.NewConsistent(ring.DefaultConsistentConfig())
			if err != nil {
				panic(err) // the library's defaults are valid
			}
			return r
		}},
	}
}

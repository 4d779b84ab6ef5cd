package ringtest

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/ring"
)

// fingerprint checks Fingerprint against FingerprintOf, other instances and
// the default ring.
func (s *suite) fingerprint(t *testing.T) {
	members := UUIDs(memberSeed, 10)
	extra := UUIDs(extraSeed, 1)[0]

	empty := s.newRing(t)
	assert.Equal(t, ring.FingerprintOf(nil), empty.Fingerprint(), "an empty ring's fingerprint must equal FingerprintOf(nil)")

	a := s.build(t, members)
	b := s.build(t, shuffled(members))
	assert.Equal(t, ring.FingerprintOf(a.Members()), a.Fingerprint(), "Fingerprint must equal FingerprintOf(Members())")
	assert.Equal(t, ring.FingerprintOf(members), a.Fingerprint(), "Fingerprint must equal FingerprintOf of the members added")
	assert.Equal(t, a.Fingerprint(), b.Fingerprint(), "rings with the same members must have equal fingerprints whatever the insertion order")

	def, err := ring.New(ring.Config{})
	require.NoError(t, err)
	require.NoError(t, ring.Sync(def, members))
	assert.Equal(t, def.Fingerprint(), a.Fingerprint(), "fingerprints must be comparable across ring implementations")

	fp := a.Fingerprint()
	require.NoError(t, a.Add(extra))
	assert.NotEqual(t, fp, a.Fingerprint(), "different members must give a different fingerprint (after Add)")
	assert.Equal(t, ring.FingerprintOf(a.Members()), a.Fingerprint(), "Fingerprint must track Add")
	require.NoError(t, a.Remove(members[0]))
	assert.NotEqual(t, fp, a.Fingerprint(), "different members must give a different fingerprint (after Remove)")
	require.NoError(t, a.Add(members[0]))
	require.NoError(t, a.Remove(extra))
	assert.Equal(t, fp, a.Fingerprint(), "restoring the members must restore the fingerprint")
}

// errorCases checks the error contract and Members' copy semantics.
func (s *suite) errorCases(t *testing.T) {
	members := sortedUUIDs(memberSeed, 3)

	t.Run("EmptyRingLocate", func(t *testing.T) {
		r := s.newRing(t)
		_, err := r.Locate(members[0])
		require.ErrorIs(t, err, ring.ErrEmpty, "Locate on a new ring must return ErrEmpty")
		require.NoError(t, r.Add(members[0]))
		require.NoError(t, r.Remove(members[0]))
		_, err = r.Locate(members[0])
		require.ErrorIs(t, err, ring.ErrEmpty, "Locate after removing the last member must return ErrEmpty")
		assert.Empty(t, r.Members(), "an empty ring must have no members")
	})
	t.Run("DuplicateAdd", func(t *testing.T) {
		r := s.build(t, members)
		fp := r.Fingerprint()
		require.ErrorIs(t, r.Add(members[1]), ring.ErrMemberExists, "Add of a present member must return ErrMemberExists")
		assert.Equal(t, members, r.Members(), "a failed Add must leave the ring unchanged")
		assert.Equal(t, fp, r.Fingerprint(), "a failed Add must leave the fingerprint unchanged")
	})
	t.Run("RemoveAbsent", func(t *testing.T) {
		r := s.build(t, members[:2])
		for _, m := range []string{members[2], "", members[0] + "x"} {
			require.ErrorIs(t, r.Remove(m), ring.ErrMemberNotFound, "Remove(%q) of an absent member must return ErrMemberNotFound", m)
		}
		assert.Equal(t, members[:2], r.Members(), "a failed Remove must leave the ring unchanged")
		empty := s.newRing(t)
		require.ErrorIs(t, empty.Remove(members[0]), ring.ErrMemberNotFound, "Remove on an empty ring must return ErrMemberNotFound")
	})
	t.Run("InvalidMember", func(t *testing.T) {
		r := s.build(t, members)
		require.ErrorIs(t, r.Add(""), ring.ErrInvalidMember, `Add("") must return ErrInvalidMember`)
		assert.Equal(t, members, r.Members(), "a rejected Add must leave the ring unchanged")
	})
	t.Run("MembersSortedCopy", func(t *testing.T) {
		r := s.build(t, shuffled(members))
		got := r.Members()
		require.True(t, slices.IsSorted(got), "Members must be sorted, got %v", got)
		got[0] = "mutated"
		assert.Equal(t, members, r.Members(), "Members must return a copy the caller may modify")
		o, err := r.Locate(members[0])
		require.NoError(t, err)
		assert.Contains(t, members, o, "modifying Members' result must not affect Locate")
	})
}

// syncCase checks ring.Sync, through Replace and through Add/Remove.
func (s *suite) syncCase(t *testing.T) {
	paths := map[string]func(t *testing.T) ring.Ring{
		"Direct":       s.newRing,                                                           // Replace if implemented
		"ViaAddRemove": func(t *testing.T) ring.Ring { return addRemoveOnly{s.newRing(t)} }, // hides Replace
	}
	all := UUIDs(memberSeed, 12)
	ks := keys()
	for name, newRing := range paths {
		t.Run(name, func(t *testing.T) {
			r := newRing(t)
			for _, want := range [][]string{all[:5], all[3:12], all[11:], all[:10], nil} {
				input := shuffled(want)
				kept := slices.Clone(input)
				require.NoError(t, ring.Sync(r, input), "Sync to %d members must succeed", len(want))
				assert.Equal(t, kept, input, "Sync must not modify its argument")
				assert.Equal(t, ring.FingerprintOf(want), r.Fingerprint(), "after Sync the membership must equal the requested one")
				assert.Equal(t, len(want), len(r.Members()), "after Sync the membership must equal the requested one")
				if len(want) > 0 {
					requireSameOwners(t, "a ring reached by Sync must agree with one built by Add",
						owners(t, s.build(t, want), ks), owners(t, r, ks), ks)
				}
				require.NoError(t, ring.Sync(r, input), "a repeated Sync must succeed (Sync is idempotent)")
			}
			err := ring.Sync(r, []string{all[0], "", all[1], all[0]})
			require.ErrorIs(t, err, ring.ErrInvalidMember, "Sync with an empty name must report ErrInvalidMember")
			assert.Equal(t, slices.Sorted(slices.Values(all[:2])), r.Members(),
				"Sync must apply the valid names despite an invalid one, and ignore duplicates")
		})
	}
}

// addRemoveOnly exposes only the Ring methods of a ring, hiding optional
// interfaces such as ring.Replacer.
type addRemoveOnly struct{ ring.Ring }

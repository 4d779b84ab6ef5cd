package ringtest

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// agreement checks that owners depend only on the membership.
func (s *suite) agreement(t *testing.T) {
	members := UUIDs(memberSeed, 10)
	extra := UUIDs(extraSeed, 3)
	ks := keys()

	t.Run("SameOwnerAcrossInstances", func(t *testing.T) {
		a := owners(t, s.build(t, members), ks)
		b := owners(t, s.build(t, members), ks)
		requireSameOwners(t, "independent rings with the same members must agree on every owner", a, b, ks)
	})
	t.Run("SameOwnerAcrossInsertionOrders", func(t *testing.T) {
		want := owners(t, s.build(t, members), ks)
		rev := slices.Clone(members)
		slices.Reverse(rev)
		for name, order := range map[string][]string{"reversed": rev, "shuffled": shuffled(members)} {
			got := owners(t, s.build(t, order), ks)
			requireSameOwners(t, "owners must not depend on insertion order ("+name+")", want, got, ks)
		}
	})
	t.Run("SameOwnerAfterUnrelatedHistory", func(t *testing.T) {
		want := owners(t, s.build(t, members), ks)
		r := s.build(t, append(slices.Clone(extra[:2]), members...))
		require.NoError(t, r.Add(extra[2]))
		for _, m := range extra {
			require.NoError(t, r.Remove(m))
		}
		got := owners(t, r, ks)
		requireSameOwners(t, "owners must depend only on current members, not on members added and removed before", want, got, ks)
	})
	t.Run("ArbitraryNames", func(t *testing.T) {
		// Names that are prefixes of each other, or end in digits, must not
		// collide inside the implementation.
		names := []string{"a", "a1", "a10", "a100", "node-1", "node-10", "Z", "日本", "x\x00y"}
		r := s.build(t, names)
		require.Equal(t, slices.Sorted(slices.Values(names)), r.Members(), "Members must hold every added name")
		owners(t, r, ks)
		for _, n := range names {
			require.NoError(t, r.Remove(n), "Remove(%q) of a present member must succeed", n)
		}
		require.Empty(t, r.Members(), "removing every member must empty the ring")
	})
}

// ownership checks that keys go to current members, spread over all of them.
func (s *suite) ownership(t *testing.T) {
	ks := keys()
	for _, n := range []int{1, 2, 3, 10} {
		members := UUIDs(memberSeed, n)
		r := s.build(t, members)
		count := map[string]int{}
		for _, o := range owners(t, r, ks) {
			count[o]++
		}
		for _, m := range members {
			assert.Positive(t, count[m], "with %d members and %d keys, every member must own some keys; %q owns none", n, len(ks), m)
		}
	}
}

// movement checks that a change moves only the keys it must.
func (s *suite) movement(t *testing.T) {
	members := UUIDs(memberSeed, 10)
	extra := UUIDs(extraSeed, 1)[0]
	ks := keys()

	t.Run("AddMovesKeysOnlyToNewMember", func(t *testing.T) {
		r := s.build(t, members)
		before := owners(t, r, ks)
		require.NoError(t, r.Add(extra))
		after := owners(t, r, ks)
		gained, stray := 0, 0
		for i := range ks {
			switch {
			case after[i] == extra:
				gained++
			case after[i] != before[i]:
				stray++
			}
		}
		assert.Positive(t, gained, "an added member must take over some keys")
		s.stray(t, "after Add, keys may only move to the added member", stray, len(ks))
	})
	t.Run("RemoveMovesKeysOnlyFromRemovedMember", func(t *testing.T) {
		r := s.build(t, members)
		removed := members[3]
		before := owners(t, r, ks)
		require.NoError(t, r.Remove(removed))
		after := owners(t, r, ks)
		stray := 0
		for i := range ks {
			require.NotEqual(t, removed, after[i], "a removed member must own no keys")
			if before[i] != removed && after[i] != before[i] {
				stray++
			}
		}
		s.stray(t, "after Remove, only the removed member's keys may move", stray, len(ks))
	})
	t.Run("AddThenRemoveRestoresOwners", func(t *testing.T) {
		r := s.build(t, members)
		before := owners(t, r, ks)
		require.NoError(t, r.Add(extra))
		require.NoError(t, r.Remove(extra))
		requireSameOwners(t, "adding then removing a member must restore every owner", before, owners(t, r, ks), ks)
	})
}

// stray fails, or logs under Features.ExtraMovement, when keys moved between
// members that stayed.
func (s *suite) stray(t *testing.T, rule string, stray, total int) {
	t.Helper()
	if s.features.ExtraMovement {
		t.Logf("%d of %d keys (%.1f%%) moved between members that stayed (allowed by Features.ExtraMovement)",
			stray, total, 100*float64(stray)/float64(total))
		return
	}
	assert.Zero(t, stray, "%s: %d of %d keys moved between members that stayed", rule, stray, total)
}

package ring

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Fingerprint is a 64-bit digest of a ring's membership, computed by
// [FingerprintOf]. Nodes exchange fingerprints to detect cheaply whether
// their rings agree. It covers membership only: rings only agree on owners
// when they also use the same implementation and configuration.
type Fingerprint uint64

// String returns the fingerprint as 16 lower-case hex digits.
func (f Fingerprint) String() string {
	return fmt.Sprintf("%016x", uint64(f))
}

// FingerprintOf returns the fingerprint of a membership: the xxhash (XXH64,
// seed 0) of the sorted, de-duplicated members, each preceded by its length
// as an 8-byte little-endian integer so that no two different memberships
// encode alike. The result does not depend on the order of members, and is
// the same on every node and for every [Ring] implementation. FingerprintOf
// sorts a copy; it never modifies members. It is safe for concurrent use.
func FingerprintOf(members []string) Fingerprint {
	if slices.IsSorted(members) {
		return fingerprintSorted(members)
	}
	sorted := slices.Clone(members)
	slices.Sort(sorted)
	return fingerprintSorted(sorted)
}

// fingerprintSorted is FingerprintOf for an already sorted slice; it skips
// adjacent duplicates.
func fingerprintSorted(sorted []string) Fingerprint {
	d := xxhash.New()
	var n [8]byte
	for i, m := range sorted {
		if i > 0 && sorted[i-1] == m {
			continue
		}
		binary.LittleEndian.PutUint64(n[:], uint64(len(m)))
		_, _ = d.Write(n[:])
		_, _ = d.WriteString(m)
	}
	return Fingerprint(d.Sum64())
}

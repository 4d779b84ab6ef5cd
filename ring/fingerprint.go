package ring

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Fingerprint is a digest of a ring's membership, by [FingerprintOf].
type Fingerprint uint64

// String returns the fingerprint as 16 lower-case hex digits.
func (f Fingerprint) String() string {
	return fmt.Sprintf("%016x", uint64(f))
}

// FingerprintOf returns the fingerprint of a membership: the XXH64, seed 0,
// of the sorted, de-duplicated members, each preceded by its length as an
// 8-byte little-endian integer. It never modifies members.
func FingerprintOf(members []string) Fingerprint {
	if slices.IsSorted(members) {
		return fingerprintSorted(members)
	}
	sorted := slices.Clone(members)
	slices.Sort(sorted)
	return fingerprintSorted(sorted)
}

// fingerprintSorted is FingerprintOf for a sorted slice.
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

package ring

import (
	"math/bits"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// snapshot is one immutable state of a [Table]. Members are numbered
// densely, in no order; owners holds a member number per partition.
type snapshot struct {
	shift   uint        // key hash >> shift is the partition
	byIndex []string    // member number -> name
	hashes  []uint64    // member number -> xxhash of the name
	owners  []uint16    // partition -> member number; nil when empty
	names   []string    // member names, sorted
	fp      Fingerprint // FingerprintOf(names)
}

// emptySnapshot returns an empty ring's snapshot.
func emptySnapshot(partitions int) *snapshot {
	return &snapshot{
		shift: uint(64 - bits.TrailingZeros(uint(partitions))),
		fp:    fingerprintSorted(nil),
	}
}

// golden is 2^64 divided by the golden ratio, the splitmix64 increment.
const golden = 0x9e3779b97f4a7c15

// partitionSeed returns partition p's seed.
func partitionSeed(p int) uint64 {
	return (uint64(p) + 1) * golden
}

// mix64 is the splitmix64 finaliser. A member's score for partition p is
// mix64(memberHash ^ partitionSeed(p)).
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// wins reports whether score s and name n beat score ws and name wn: the
// higher score wins, and the smaller name breaks ties.
func wins(s uint64, n string, ws uint64, wn string) bool {
	return s > ws || (s == ws && n < wn)
}

// draft is a writer's mutable copy of a snapshot.
type draft struct {
	shift   uint
	byIndex []string
	hashes  []uint64
	owners  []uint16
}

// edit returns a mutable copy of s.
func (s *snapshot) edit() *draft {
	return &draft{
		shift:   s.shift,
		byIndex: slices.Clone(s.byIndex),
		hashes:  slices.Clone(s.hashes),
		owners:  slices.Clone(s.owners),
	}
}

// best returns the number of the member that wins partition p; d must have
// members.
func (d *draft) best(p int) uint16 {
	seed := partitionSeed(p)
	b, bs := 0, mix64(d.hashes[0]^seed)
	for i, h := range d.hashes {
		s := mix64(h ^ seed)
		if s < bs || i == b {
			continue
		}
		if wins(s, d.byIndex[i], bs, d.byIndex[b]) {
			b, bs = i, s
		}
	}
	return uint16(b)
}

// add adds name, which must be absent, giving it the partitions it wins.
func (d *draft) add(name string) {
	idx := uint16(len(d.byIndex))
	h := xxhash.Sum64String(name)
	d.byIndex = append(d.byIndex, name)
	d.hashes = append(d.hashes, h)
	if idx == 0 {
		d.owners = make([]uint16, 1<<(64-d.shift))
		return
	}
	for p, o := range d.owners {
		seed := partitionSeed(p)
		s, ws := mix64(h^seed), mix64(d.hashes[o]^seed)
		if s < ws {
			continue
		}
		if wins(s, name, ws, d.byIndex[o]) {
			d.owners[p] = idx
		}
	}
}

// indexOf returns the number of member name in d, or -1.
func (d *draft) indexOf(name string) int {
	return slices.Index(d.byIndex, name)
}

// remove removes member r, giving its partitions to their next winner;
// the last member takes number r.
func (d *draft) remove(r int) {
	last := len(d.byIndex) - 1
	d.byIndex[r], d.hashes[r] = d.byIndex[last], d.hashes[last]
	d.byIndex[last] = ""
	d.byIndex, d.hashes = d.byIndex[:last], d.hashes[:last]
	if last == 0 {
		d.owners = nil
		return
	}
	for p, o := range d.owners {
		switch int(o) {
		case r:
			d.owners[p] = d.best(p)
		case last:
			d.owners[p] = uint16(r)
		}
	}
}

// rebuild replaces the members with names, distinct and non-empty, and
// recomputes every partition's owner.
func (d *draft) rebuild(names []string) {
	d.byIndex = append(d.byIndex[:0], names...)
	d.hashes = d.hashes[:0]
	for _, n := range names {
		d.hashes = append(d.hashes, xxhash.Sum64String(n))
	}
	if len(names) == 0 {
		d.owners = nil
		return
	}
	if d.owners == nil {
		d.owners = make([]uint16, 1<<(64-d.shift))
	}
	for p := range d.owners {
		d.owners[p] = d.best(p)
	}
}

// freeze turns d into an immutable snapshot; d must not be used afterwards.
func (d *draft) freeze() *snapshot {
	names := slices.Sorted(slices.Values(d.byIndex))
	return &snapshot{
		shift:   d.shift,
		byIndex: slices.Clip(d.byIndex),
		hashes:  slices.Clip(d.hashes),
		owners:  d.owners,
		names:   names,
		fp:      fingerprintSorted(names),
	}
}

package ring

import (
	"math/bits"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// snapshot is one immutable state of a [Table]. Members are numbered
// densely, in no order; owners holds each partition's owner under the
// load bound (see assign). A partition's first choice, the member with its
// top rendezvous score, is its owner unless the partition is listed in
// diverted (a few percent of them), beside its first choice.
type snapshot struct {
	shift    uint        // key hash >> shift is the partition
	byIndex  []string    // member number -> name
	hashes   []uint64    // member number -> xxhash of the name
	owners   []uint16    // partition -> member number; nil when empty
	diverted []uint32    // partitions not owned by their first choice, ascending
	divFirst []uint16    // diverted[i]'s first choice
	names    []string    // member names, sorted
	fp       Fingerprint // FingerprintOf(names)
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

// draft is a writer's mutable copy of a snapshot. Its changes keep first
// up to date; freeze computes the owners from it.
type draft struct {
	shift   uint
	byIndex []string
	hashes  []uint64
	first   []uint16
}

// edit returns a mutable copy of s.
func (s *snapshot) edit() *draft {
	first := slices.Clone(s.owners)
	for i, p := range s.diverted {
		first[p] = s.divFirst[i]
	}
	return &draft{
		shift:   s.shift,
		byIndex: slices.Clone(s.byIndex),
		hashes:  slices.Clone(s.hashes),
		first:   first,
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

// add adds name, which must be absent, making it the first choice of the
// partitions where its score is the highest.
func (d *draft) add(name string) {
	idx := uint16(len(d.byIndex))
	h := xxhash.Sum64String(name)
	d.byIndex = append(d.byIndex, name)
	d.hashes = append(d.hashes, h)
	if idx == 0 {
		d.first = make([]uint16, 1<<(64-d.shift))
		return
	}
	for p, o := range d.first {
		seed := partitionSeed(p)
		s, ws := mix64(h^seed), mix64(d.hashes[o]^seed)
		if s < ws {
			continue
		}
		if wins(s, name, ws, d.byIndex[o]) {
			d.first[p] = idx
		}
	}
}

// indexOf returns the number of member name in d, or -1.
func (d *draft) indexOf(name string) int {
	return slices.Index(d.byIndex, name)
}

// remove removes member r, making the runner-up the first choice of the
// partitions it had won; the last member takes number r.
func (d *draft) remove(r int) {
	last := len(d.byIndex) - 1
	d.byIndex[r], d.hashes[r] = d.byIndex[last], d.hashes[last]
	d.byIndex[last] = ""
	d.byIndex, d.hashes = d.byIndex[:last], d.hashes[:last]
	if last == 0 {
		d.first = nil
		return
	}
	for p, o := range d.first {
		switch int(o) {
		case r:
			d.first[p] = d.best(p)
		case last:
			d.first[p] = uint16(r)
		}
	}
}

// rebuild replaces the members with names, distinct and non-empty, and
// recomputes every partition's first choice.
func (d *draft) rebuild(names []string) {
	d.byIndex = append(d.byIndex[:0], names...)
	d.hashes = d.hashes[:0]
	for _, n := range names {
		d.hashes = append(d.hashes, xxhash.Sum64String(n))
	}
	if len(names) == 0 {
		d.first = nil
		return
	}
	if d.first == nil {
		d.first = make([]uint16, 1<<(64-d.shift))
	}
	for p := range d.first {
		d.first[p] = d.best(p)
	}
}

// freeze turns d into an immutable snapshot, computing its owners; d must
// not be used afterwards.
func (d *draft) freeze() *snapshot {
	names := slices.Sorted(slices.Values(d.byIndex))
	owners := d.assign()
	var diverted []uint32
	var divFirst []uint16
	for p, o := range owners {
		if f := d.first[p]; f != o {
			diverted = append(diverted, uint32(p))
			divFirst = append(divFirst, f)
		}
	}
	return &snapshot{
		shift:    d.shift,
		byIndex:  slices.Clip(d.byIndex),
		hashes:   slices.Clip(d.hashes),
		owners:   owners,
		diverted: slices.Clip(diverted),
		divFirst: slices.Clip(divFirst),
		names:    names,
		fp:       fingerprintSorted(names),
	}
}

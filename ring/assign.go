package ring

// The load bound. Rendezvous hashing alone gives each member a share that
// deviates by about sqrt(N/P) from the mean: the busiest of 100 members
// carries about 1.10× the mean at 65536 partitions, 1.06× at 262144. A
// Table caps every member at capacity(P, N) partitions, at most
// boundPermille/1000 of the mean (rounded up to the mean when that is not
// a whole number of partitions), and gives a partition that its top member
// cannot hold to the next member in its rendezvous order that can.

// boundPermille is the load bound in thousandths of the mean share.
const boundPermille = 1015

// capacity returns the most partitions one of n members may own out of
// partitions: the bound's share rounded down, but never below the mean
// rounded up, so that the members can hold every partition.
func capacity(partitions, n int) int {
	return max((partitions+n-1)/n, partitions*boundPermille/(1000*n))
}

// worse reports whether the member whose name hashes to h prefers
// partition b to partition a: it scores a lower, or equal and a has the
// higher number. Every pair of a member and a partition ranks in one
// order (score, then member name, then partition number), which both
// sides follow; that makes the stable assignment unique.
func worse(h uint64, a, b uint32) bool {
	sa, sb := mix64(h^partitionSeed(int(a))), mix64(h^partitionSeed(int(b)))
	return sa < sb || (sa == sb && a > b)
}

// assign returns each partition's owner: the unique stable assignment of
// partitions to members holding at most capacity partitions each, where a
// partition prefers the members in its rendezvous order and a member the
// partitions it scores higher. No partition and member would both rather
// have each other than what they hold, so the owners depend only on the
// members, not on the order of the changes that led to them.
//
// It runs partition-proposing deferred acceptance (Gale-Shapley) from the
// first choices: each partition proposes to its top member; a full member
// keeps the partitions it scores highest and turns away its lowest, which
// proposes to its next member. Most partitions keep their first choice,
// so the cost is O(P) plus O(N) per proposal turned away.
func (d *draft) assign() []uint16 {
	n := len(d.byIndex)
	if n == 0 {
		return nil
	}
	partitions := len(d.first)
	c := capacity(partitions, n)
	owners := make([]uint16, partitions)
	count := make([]int32, n)
	fits := true
	for _, m := range d.first {
		count[m]++
		if int(count[m]) > c {
			fits = false
		}
	}
	if fits {
		copy(owners, d.first)
		return owners
	}

	// holds[m] is member m's partitions, a min-heap by worse once full; all
	// share one array, c entries each, so none ever reallocates.
	backing := make([]uint32, n*c)
	holds := make([][]uint32, n)
	for m := range holds {
		holds[m] = backing[m*c : m*c : (m+1)*c]
	}
	type refusal struct {
		p     uint32
		by    uint16 // the member that turned it away
		score uint64 // that member's score for it
	}
	var queue []refusal

	// propose offers partition p to member m, which scores it s; a full
	// member turns away the worse of p and its worst.
	propose := func(p uint32, m uint16) {
		h, hm := holds[m], d.hashes[m]
		if len(h) < c {
			h = append(h, p)
			holds[m] = h
			if len(h) == c {
				heapInit(h, hm)
			}
			return
		}
		if worse(hm, p, h[0]) {
			queue = append(queue, refusal{p: p, by: m, score: mix64(hm ^ partitionSeed(int(p)))})
			return
		}
		out := h[0]
		h[0] = p
		heapDown(h, 0, hm)
		queue = append(queue, refusal{p: out, by: m, score: mix64(hm ^ partitionSeed(int(out)))})
	}

	for p, m := range d.first {
		propose(uint32(p), m)
	}
	for len(queue) > 0 {
		r := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		propose(r.p, d.next(int(r.p), r.by, r.score))
	}
	for m, h := range holds {
		for _, p := range h {
			owners[p] = uint16(m)
		}
	}
	return owners
}

// next returns the member that follows member by, whose score is bs, in
// partition p's rendezvous order. The members' capacities add up to at
// least the partitions, so a partition turned away always has a next
// member.
func (d *draft) next(p int, by uint16, bs uint64) uint16 {
	seed := partitionSeed(p)
	byName := d.byIndex[by]
	found := false
	var b uint16
	var best uint64
	for i, h := range d.hashes {
		s := mix64(h ^ seed)
		n := d.byIndex[i]
		if !wins(bs, byName, s, n) { // ranked at or above by
			continue
		}
		if !found || wins(s, n, best, d.byIndex[b]) {
			b, best, found = uint16(i), s, true
		}
	}
	if !found {
		panic("ring: a partition was turned away by every member; capacity is wrong")
	}
	return b
}

// heapInit orders h, the partitions of the member whose name hashes to
// hm, as a min-heap by worse.
func heapInit(h []uint32, hm uint64) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		heapDown(h, i, hm)
	}
}

// heapDown restores the heap below index i.
func heapDown(h []uint32, i int, hm uint64) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		j := l
		if r := l + 1; r < len(h) && worse(hm, h[r], h[l]) {
			j = r
		}
		if !worse(hm, h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

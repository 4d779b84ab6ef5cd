package ring

import (
	"encoding/binary"
	"encoding/hex"
)

// Sharer is a [Ring] that knows each member's exact share of the key
// space; [Table] is one.
type Sharer interface {
	// Shares returns each member's share of the key space, from 0 to 1;
	// they add up to 1 (nil for an empty ring).
	Shares() map[string]float64
}

// Shares returns each member's share of r's key space: exact for a
// [Sharer], else estimated by locating 65,536 keys spread evenly over
// the UUID space (to within about 1 % of the key space). Nil for an
// empty ring.
func Shares(r Ring) map[string]float64 {
	if s, ok := r.(Sharer); ok {
		return s.Shares()
	}
	const samples = 1 << 16
	counts := make(map[string]int)
	var b [16]byte
	key := make([]byte, 32)
	for i := range samples {
		binary.BigEndian.PutUint64(b[:8], uint64(i)*(1<<48)+0x9e3779b97f4a7c15*uint64(i+1)) // spread, fixed: every node estimates the same
		binary.BigEndian.PutUint64(b[8:], 0x94d049bb133111eb*uint64(i+1))
		hex.Encode(key, b[:])
		m, err := r.Locate(string(key))
		if err != nil {
			return nil
		}
		counts[m]++
	}
	out := make(map[string]float64, len(counts))
	for m, n := range counts {
		out[m] = float64(n) / samples
	}
	return out
}

// Shares returns each member's exact share of the key space: the
// partitions it owns over all partitions. It implements [Sharer].
func (t *Table) Shares() map[string]float64 {
	s := t.cur.Load()
	if s == nil || len(s.byIndex) == 0 {
		return nil
	}
	counts := make([]int, len(s.byIndex))
	for _, o := range s.owners {
		counts[o]++
	}
	out := make(map[string]float64, len(counts))
	for i, n := range counts {
		out[s.byIndex[i]] = float64(n) / float64(len(s.owners))
	}
	return out
}

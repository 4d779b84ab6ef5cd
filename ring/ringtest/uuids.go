package ringtest

import (
	"encoding/hex"
	"math/rand/v2"
)

// streamCloudbus is the PCG stream used by UUIDs ("cloudbus" in ASCII).
const streamCloudbus = 0x636c6f7564627573

// UUIDs returns n deterministic pseudo-random version-4 UUIDs in the
// canonical cloudbus form: 32 lower-case hex digits, no dashes. The same seed
// always gives the same list; different seeds give unrelated lists. UUIDs is
// for tests and benchmarks: it is not cryptographically random. It is safe
// for concurrent use.
func UUIDs(seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, streamCloudbus))
	out := make([]string, n)
	var b [16]byte
	var h [32]byte
	for i := range out {
		hi, lo := rng.Uint64(), rng.Uint64()
		for j := range 8 {
			b[j] = byte(hi >> (56 - 8*j))
			b[8+j] = byte(lo >> (56 - 8*j))
		}
		b[6] = b[6]&0x0f | 0x40 // version 4
		b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
		hex.Encode(h[:], b[:])
		out[i] = string(h[:])
	}
	return out
}

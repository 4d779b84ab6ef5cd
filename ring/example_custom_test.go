package ring_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/ring/ringtest"
)

// rendezvous is a user-supplied ring.Ring: highest-random-weight hashing
// over every member for every key (O(members) per Locate, no table), guarded
// by a RWMutex.
type rendezvous struct {
	mu      sync.RWMutex
	members []string // sorted
	hashes  []uint64 // xxhash of members[i]
}

func (r *rendezvous) Add(m string) error {
	if m == "" {
		return ring.ErrInvalidMember
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	i, found := slices.BinarySearch(r.members, m)
	if found {
		return ring.ErrMemberExists
	}
	r.members = slices.Insert(r.members, i, m)
	r.hashes = slices.Insert(r.hashes, i, xxhash.Sum64String(m))
	return nil
}

func (r *rendezvous) Remove(m string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, found := slices.BinarySearch(r.members, m)
	if !found {
		return ring.ErrMemberNotFound
	}
	r.members, r.hashes = slices.Delete(r.members, i, i+1), slices.Delete(r.hashes, i, i+1)
	return nil
}

func (r *rendezvous) Locate(key string) (string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.members) == 0 {
		return "", ring.ErrEmpty
	}
	k, best, top := xxhash.Sum64String(key), 0, uint64(0)
	for i, h := range r.hashes {
		s := (k ^ h) * 0xbf58476d1ce4e5b9 // score: a cheap mixer of key and member
		if s ^= s >> 31; s > top {
			best, top = i, s
		}
	}
	return r.members[best], nil
}

func (r *rendezvous) Members() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.members)
}

func (r *rendezvous) Fingerprint() ring.Fingerprint { return ring.FingerprintOf(r.Members()) }

// The custom ring passes the same conformance suite as the built-in rings,
// with the strictest contract: plain rendezvous hashing moves no key
// between members that stay.
func TestCustomRingConformance(t *testing.T) {
	ringtest.Run(t, func(t *testing.T) ring.Ring { return &rendezvous{} })
}

// route stands for any cloudbus code that accepts a ring.Ring.
func route(r ring.Ring, resource string) string {
	owner, err := r.Locate(resource)
	if err != nil {
		return err.Error()
	}
	return owner
}

func Example_customRing() {
	var r ring.Ring = &rendezvous{}
	fmt.Println(route(r, "7d444840e5b3455e9a4b1f1a6f4b9c1d"))

	_ = ring.Sync(r, exampleNodes) // the helpers work on any Ring
	fmt.Println(route(r, "7d444840e5b3455e9a4b1f1a6f4b9c1d"))
	fmt.Println(route(r, "0e9f4c7a2b5d4e1f8a3c6b9d2e5f8a1b"))

	// Fingerprints compare across implementations.
	def, _ := ring.New(ring.Config{})
	_ = ring.Sync(def, exampleNodes)
	fmt.Println(r.Fingerprint() == def.Fingerprint())
	// Output:
	// ring: no members; add at least one member before locating keys
	// c3d2e1f0a9b84c7d9e6f5a4b3c2d1e0f
	// 5f1c0e6a9b2d4c3e8f7a6b5c4d3e2f10
	// true
}

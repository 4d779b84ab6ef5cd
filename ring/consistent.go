package ring

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// Consistent is a [Ring] backed by github.com/buraksezer/consistent. The
// zero Consistent is an empty ring with [DefaultConsistentConfig]; it must
// not be copied after first use. Locate waits for Add and Remove, and a
// change may move keys between members that stay.
type Consistent struct {
	mu   sync.Mutex // serialises writers
	cfg  ConsistentConfig
	lib  atomic.Pointer[consistent.Consistent]
	view atomic.Pointer[membership]
}

var _ Replacer = (*Consistent)(nil)

// membership is an immutable member list.
type membership struct {
	names []string // sorted
	fp    Fingerprint
}

// newMembership returns the membership of the sorted names.
func newMembership(sorted []string) *membership {
	return &membership{names: sorted, fp: fingerprintSorted(sorted)}
}

// consistentMember is a member as the library sees it.
type consistentMember struct {
	name string
	key  string // libKey(name)
}

// String returns m's library key.
func (m *consistentMember) String() string { return m.key }

// libKey returns member's library key: member and a NUL byte, so that no
// two members' virtual-node keys collide.
func libKey(member string) string { return member + "\x00" }

// xxhasher is Consistent's consistent.Hasher.
type xxhasher struct{}

// Sum64 returns the xxhash of b.
func (xxhasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// NewConsistent returns an empty Consistent ring configured by cfg, or the
// errors of [ConsistentConfig.Validate].
func NewConsistent(cfg ConsistentConfig) (*Consistent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Consistent{cfg: cfg.withDefaults()}
	c.init()
	return c, nil
}

// init makes a zero Consistent an empty default ring; writers call it with
// c.mu held. Locate reads c.cfg only after loading a non-nil lib.
func (c *Consistent) init() {
	if c.lib.Load() != nil {
		return
	}
	c.cfg = c.cfg.withDefaults()
	c.view.Store(newMembership(nil))
	c.lib.Store(c.build(nil))
}

// build returns a library ring holding the sorted members.
func (c *Consistent) build(sorted []string) *consistent.Consistent {
	var ms []consistent.Member
	for _, m := range sorted {
		ms = append(ms, &consistentMember{name: m, key: libKey(m)})
	}
	return consistent.New(ms, consistent.Config{
		Hasher:            xxhasher{},
		PartitionCount:    c.cfg.PartitionCount,
		ReplicationFactor: c.cfg.ReplicationFactor,
		Load:              c.cfg.Load,
	})
}

// Add adds member. It returns an error wrapping ErrInvalidMember,
// ErrMemberExists or ErrTooManyMembers; c is then unchanged.
func (c *Consistent) Add(member string) error {
	if member == "" {
		return fmt.Errorf("ring: add %q: %w", member, ErrInvalidMember)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	v := c.view.Load()
	i, found := slices.BinarySearch(v.names, member)
	if found {
		return fmt.Errorf("ring: add %q: %w", member, ErrMemberExists)
	}
	if !c.cfg.fits(len(v.names) + 1) {
		return fmt.Errorf("ring: add %q: %d partitions cannot be spread over %d members: %w",
			member, c.cfg.PartitionCount, len(v.names)+1, ErrTooManyMembers)
	}
	c.lib.Load().Add(&consistentMember{name: member, key: libKey(member)})
	c.view.Store(newMembership(slices.Insert(slices.Clone(v.names), i, member)))
	return nil
}

// Remove removes member, or returns an error wrapping ErrMemberNotFound.
func (c *Consistent) Remove(member string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	v := c.view.Load()
	i, found := slices.BinarySearch(v.names, member)
	if !found {
		return fmt.Errorf("ring: remove %q: %w", member, ErrMemberNotFound)
	}
	if !c.cfg.fits(len(v.names) - 1) {
		// Unreachable with Load > 1; the library would panic.
		return fmt.Errorf("ring: remove %q: %w", member, ErrTooManyMembers)
	}
	c.lib.Load().Remove(libKey(member))
	c.view.Store(newMembership(slices.Delete(slices.Clone(v.names), i, i+1)))
	return nil
}

// Replace implements [Replacer] by swapping in a new library ring.
func (c *Consistent) Replace(members []string) error {
	want, err := normalize(members)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	if !c.cfg.fits(len(want)) {
		return fmt.Errorf("ring: replace: %d partitions cannot be spread over %d members: %w",
			c.cfg.PartitionCount, len(want), ErrTooManyMembers)
	}
	if slices.Equal(want, c.view.Load().names) {
		return err
	}
	c.lib.Store(c.build(want))
	c.view.Store(newMembership(want))
	return err
}

// Locate returns the member that owns key, or ErrEmpty, without allocating.
func (c *Consistent) Locate(key string) (string, error) {
	lib := c.lib.Load()
	if lib == nil {
		return "", ErrEmpty
	}
	part := int(xxhash.Sum64String(key) % uint64(c.cfg.PartitionCount))
	m, ok := lib.GetPartitionOwner(part).(*consistentMember)
	if !ok {
		return "", ErrEmpty
	}
	return m.name, nil
}

// Members returns the members sorted, in a fresh slice.
func (c *Consistent) Members() []string {
	if v := c.view.Load(); v != nil {
		return append([]string{}, v.names...)
	}
	return []string{}
}

// Fingerprint returns FingerprintOf(c.Members()).
func (c *Consistent) Fingerprint() Fingerprint {
	if v := c.view.Load(); v != nil {
		return v.fp
	}
	return fingerprintSorted(nil)
}

package ring

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// Consistent is a [Ring] backed by github.com/buraksezer/consistent
// (consistent hashing with bounded loads) with xxhash as its hasher. It is
// offered for compatibility and comparison; [Table] balances better, moves
// fewer keys and rebuilds faster (see the package documentation).
//
// The zero Consistent is an empty ring with [DefaultConsistentConfig]. A
// Consistent is safe for concurrent use and must not be copied after first
// use. Writers are serialised by a mutex.
// Locate does not allocate, but it takes the library's read lock, so it
// waits while Add or Remove redistributes partitions (which takes tens of
// milliseconds with [BalancedConsistentConfig]). Unlike [Table], a change can
// move keys between members that stay, because the load bound cascades.
//
// Member names are passed to the library with a trailing NUL byte, so that
// the library's virtual-node keys (name followed by a decimal index) can
// never collide between members such as "a" and "a1"; a collision would make
// the library panic on Remove.
type Consistent struct {
	mu   sync.Mutex // serialises writers
	cfg  ConsistentConfig
	lib  atomic.Pointer[consistent.Consistent]
	view atomic.Pointer[membership]
}

var _ Replacer = (*Consistent)(nil)

// membership is an immutable copy of a ring's member list.
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
	name string // the member name
	key  string // name + "\x00", the name given to the library
}

// String returns the name under which the library knows m.
func (m *consistentMember) String() string { return m.key }

// libKey returns the name under which the library knows member.
func libKey(member string) string { return member + "\x00" }

// xxhasher is the consistent.Hasher used by Consistent.
type xxhasher struct{}

// Sum64 returns the xxhash of b.
func (xxhasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// NewConsistent returns an empty Consistent ring configured by cfg, or an
// error describing every problem with cfg (see [ConsistentConfig.Validate]).
// Zero fields take the library defaults.
func NewConsistent(cfg ConsistentConfig) (*Consistent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Consistent{cfg: cfg.withDefaults()}
	c.init()
	return c, nil
}

// init makes a zero Consistent an empty ring with the default configuration;
// writers call it with c.mu held. Locate reads c.cfg only after loading a
// non-nil library ring, so the atomic store orders the lazy write.
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

// Add adds member and lets the library redistribute every partition. It
// returns an error wrapping ErrInvalidMember for "", ErrMemberExists if
// member is present, or ErrTooManyMembers if the partitions could not be
// placed within the load bound; c is then unchanged.
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

// Remove removes member and lets the library redistribute every partition.
// It returns an error wrapping ErrMemberNotFound if member is absent; c is
// then unchanged.
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
		// Unreachable with a valid config (Load > 1), kept so the library
		// can never panic.
		return fmt.Errorf("ring: remove %q: %w", member, ErrTooManyMembers)
	}
	c.lib.Load().Remove(libKey(member))
	c.view.Store(newMembership(slices.Delete(slices.Clone(v.names), i, i+1)))
	return nil
}

// Replace implements [Replacer]: it builds a new library ring holding the
// distinct non-empty names in members, with a single redistribution, and
// swaps it in atomically. Replace never modifies members.
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

// Locate returns the member that owns key, or ErrEmpty. It computes the
// partition as the library's FindPartitionID would, from xxhash.Sum64String
// instead of LocateKey([]byte(key)), so it does not allocate.
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

// Members returns the members in increasing order, as a fresh slice owned by
// the caller.
func (c *Consistent) Members() []string {
	if v := c.view.Load(); v != nil {
		return append([]string{}, v.names...)
	}
	return []string{}
}

// Fingerprint returns FingerprintOf(c.Members()), computed once per change.
func (c *Consistent) Fingerprint() Fingerprint {
	if v := c.view.Load(); v != nil {
		return v.fp
	}
	return fingerprintSorted(nil)
}

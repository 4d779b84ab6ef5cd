package ring

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// Table is the default [Ring]: a fixed table of partitions whose owners are
// chosen by rendezvous (highest-random-weight) hashing. A key belongs to
// partition xxhash(key) >> (64 - log2(partitions)); a partition belongs to the
// member with the highest score mix64(xxhash(member) ^ seed(partition)).
// See the package documentation for the design and its measurements.
//
// A Table is safe for concurrent use. Locate, Members and Fingerprint are
// lock-free and never block: they read an immutable snapshot published
// through an atomic pointer. Add, Remove and Replace are serialised by a
// mutex, build a new snapshot (copy-on-write) and publish it atomically, so a
// reader sees either the old or the new membership, never a mixture.
//
// The zero Table is an empty ring with [DefaultConfig]; use [New] to choose
// another configuration. A Table must not be copied after first use.
type Table struct {
	mu         sync.Mutex // serialises writers
	cur        atomic.Pointer[snapshot]
	partitions int // 0 means DefaultPartitions (zero Table)
}

var _ Replacer = (*Table)(nil)

// New returns an empty Table configured by cfg, or an error describing every
// problem with cfg (see [Config.Validate]). Zero fields of cfg take their
// defaults.
func New(cfg Config) (*Table, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	t := &Table{partitions: cfg.Partitions}
	t.cur.Store(emptySnapshot(cfg.Partitions))
	return t, nil
}

// current returns the current snapshot; writers call it with t.mu held.
func (t *Table) current() *snapshot {
	if s := t.cur.Load(); s != nil {
		return s
	}
	return emptySnapshot(orDefault(t.partitions, DefaultPartitions))
}

// orDefault returns v, or def when v is zero.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Partitions returns the number of partitions of t.
func (t *Table) Partitions() int {
	return orDefault(t.partitions, DefaultPartitions)
}

// Add adds member, moving to it exactly the partitions it wins; no key moves
// between other members. It costs O(partitions) and copies the partition
// table once. It returns an error wrapping ErrInvalidMember for "",
// ErrMemberExists if member is present, or ErrTooManyMembers if t already
// holds MaxMembers; t is then unchanged.
func (t *Table) Add(member string) error {
	if member == "" {
		return fmt.Errorf("ring: add %q: %w", member, ErrInvalidMember)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.current()
	if _, found := slices.BinarySearch(s.names, member); found {
		return fmt.Errorf("ring: add %q: %w", member, ErrMemberExists)
	}
	if len(s.byIndex) >= MaxMembers {
		return fmt.Errorf("ring: add %q: %d members: %w", member, len(s.byIndex), ErrTooManyMembers)
	}
	d := s.edit()
	d.add(member)
	t.cur.Store(d.freeze())
	return nil
}

// Remove removes member; only the keys it owned move, each to the member that
// scores next highest for its partition. It costs O(partitions) and copies
// the partition table once. It returns an error wrapping ErrMemberNotFound if
// member is absent; t is then unchanged.
func (t *Table) Remove(member string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.current()
	if _, found := slices.BinarySearch(s.names, member); !found {
		return fmt.Errorf("ring: remove %q: %w", member, ErrMemberNotFound)
	}
	d := s.edit()
	d.remove(d.indexOf(member))
	t.cur.Store(d.freeze())
	return nil
}

// Replace implements [Replacer]: it makes the membership equal to the
// distinct non-empty names in members and publishes the result in one step.
// Small changes are applied incrementally (O(partitions) per change); large
// ones rebuild the table (O(partitions × members)), whichever is cheaper.
// Owners are the same either way. Replace never modifies members.
func (t *Table) Replace(members []string) error {
	want, err := normalize(members)
	if len(want) > MaxMembers {
		return fmt.Errorf("ring: replace with %d members: %w", len(want), ErrTooManyMembers)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.current()
	var adds, removes []string
	for _, m := range want {
		if _, found := slices.BinarySearch(s.names, m); !found {
			adds = append(adds, m)
		}
	}
	for _, m := range s.names {
		if _, found := slices.BinarySearch(want, m); !found {
			removes = append(removes, m)
		}
	}
	if len(adds)+len(removes) == 0 {
		return err
	}
	d := s.edit()
	if 2*(len(adds)+len(removes)) < len(want) {
		for _, m := range removes {
			d.remove(d.indexOf(m))
		}
		for _, m := range adds {
			d.add(m)
		}
	} else {
		d.rebuild(want)
	}
	t.cur.Store(d.freeze())
	return err
}

// normalize returns the sorted distinct non-empty names in members, and an
// error wrapping ErrInvalidMember if it had to drop an empty name.
func normalize(members []string) ([]string, error) {
	want := slices.Clone(members)
	slices.Sort(want)
	want = slices.Compact(want)
	if len(want) > 0 && want[0] == "" {
		return want[1:], fmt.Errorf("ring: replace: member %q: %w", "", ErrInvalidMember)
	}
	return want, nil
}

// Locate returns the member that owns key, or ErrEmpty. It is lock-free,
// allocation-free and costs one xxhash of key plus two memory reads.
func (t *Table) Locate(key string) (string, error) {
	s := t.cur.Load()
	if s == nil || len(s.byIndex) == 0 {
		return "", ErrEmpty
	}
	return s.byIndex[s.owners[xxhash.Sum64String(key)>>s.shift]], nil
}

// Members returns the members in increasing order, as a fresh slice owned by
// the caller.
func (t *Table) Members() []string {
	s := t.cur.Load()
	if s == nil {
		return []string{}
	}
	return append([]string{}, s.names...)
}

// Fingerprint returns FingerprintOf(t.Members()), computed once per change.
func (t *Table) Fingerprint() Fingerprint {
	if s := t.cur.Load(); s != nil {
		return s.fp
	}
	return fingerprintSorted(nil)
}

package ring

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// Table is the default [Ring], a partition table owned by rendezvous
// hashing under a load bound: no member owns more than 1.015 times the
// mean share of partitions, and a change moves at most about 1.1 times the
// keys of the member that joined or left (docs/design.md, "The ring").
// The owners depend only on the members, so the Tables of one process
// share the snapshot of a member set one of them computed: many nodes in
// one process (a test's cluster) compute each change once. Locate,
// Members and Fingerprint never block. The zero Table is an empty ring with [DefaultConfig]; it
// must not be copied after first use.
type Table struct {
	mu         sync.Mutex // serialises writers
	cur        atomic.Pointer[snapshot]
	partitions int // 0 means DefaultPartitions (zero Table)
}

var _ Replacer = (*Table)(nil)

// New returns an empty Table configured by cfg, or the errors of
// [Config.Validate].
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

// Add adds member in O(partitions) (plus O(members) for each partition
// its first choice cannot hold), or returns an error wrapping
// ErrInvalidMember, ErrMemberExists or ErrTooManyMembers.
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
	want := append(slices.Clone(s.names), member)
	slices.Sort(want)
	t.cur.Store(shared.get(s.shift, want, func() *snapshot {
		d := s.edit()
		d.add(member)
		return d.freeze()
	}))
	return nil
}

// Remove removes member in O(partitions) (as Add), or returns an error
// wrapping ErrMemberNotFound.
func (t *Table) Remove(member string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.current()
	if _, found := slices.BinarySearch(s.names, member); !found {
		return fmt.Errorf("ring: remove %q: %w", member, ErrMemberNotFound)
	}
	want := slices.DeleteFunc(slices.Clone(s.names), func(n string) bool { return n == member })
	t.cur.Store(shared.get(s.shift, want, func() *snapshot {
		d := s.edit()
		d.remove(d.indexOf(member))
		return d.freeze()
	}))
	return nil
}

// Replace implements [Replacer], in O(partitions) per change or
// O(partitions × members), whichever is less.
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
	t.cur.Store(shared.get(s.shift, want, func() *snapshot {
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
		return d.freeze()
	}))
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

// Locate returns the member that owns key, or ErrEmpty, lock-free and
// without allocating.
func (t *Table) Locate(key string) (string, error) {
	s := t.cur.Load()
	if s == nil || len(s.byIndex) == 0 {
		return "", ErrEmpty
	}
	return s.byIndex[s.owners[xxhash.Sum64String(key)>>s.shift]], nil
}

// Members returns the members sorted, in a fresh slice.
func (t *Table) Members() []string {
	s := t.cur.Load()
	if s == nil {
		return []string{}
	}
	return append([]string{}, s.names...)
}

// Fingerprint returns FingerprintOf(t.Members()).
func (t *Table) Fingerprint() Fingerprint {
	if s := t.cur.Load(); s != nil {
		return s.fp
	}
	return fingerprintSorted(nil)
}

package ring

import (
	"errors"
	"fmt"
	"slices"
)

// Sync makes r's membership equal to the distinct, non-empty names in members.
// A node calls it to reconcile its ring with its membership store.
//
// If r implements [Replacer], Sync calls Replace, which applies the whole
// change in one step. Otherwise Sync first adds the missing members, then
// removes the extra ones, so that a ring whose membership is being replaced
// never becomes empty in between. Empty names are reported with
// ErrInvalidMember and the rest is still applied. Sync returns the
// [errors.Join] of every failure, each wrapped with the member it concerns;
// nil means r now holds exactly the requested members (barring concurrent
// changes by others). Sync never modifies members. Retrying is safe: Sync is
// idempotent.
func Sync(r Ring, members []string) error {
	if rp, ok := r.(Replacer); ok {
		if err := rp.Replace(members); err != nil {
			return fmt.Errorf("ring: sync: %w", err)
		}
		return nil
	}
	want := slices.Clone(members)
	slices.Sort(want)
	want = slices.Compact(want)
	have := r.Members()

	var errs []error
	for _, m := range want {
		if m == "" {
			errs = append(errs, fmt.Errorf("ring: sync: add %q: %w", m, ErrInvalidMember))
			continue
		}
		if _, found := slices.BinarySearch(have, m); found {
			continue
		}
		if err := r.Add(m); err != nil {
			errs = append(errs, fmt.Errorf("ring: sync: add %q: %w", m, err))
		}
	}
	for _, m := range have {
		if _, found := slices.BinarySearch(want, m); found {
			continue
		}
		if err := r.Remove(m); err != nil {
			errs = append(errs, fmt.Errorf("ring: sync: remove %q: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

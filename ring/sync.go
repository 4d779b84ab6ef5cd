package ring

import (
	"errors"
	"fmt"
	"slices"
)

// Sync makes r's membership the distinct non-empty names in members, with
// [Replacer.Replace] if r has it, else by adding the missing members, then
// removing the extra ones. It reports empty names with ErrInvalidMember
// and still applies the rest, and returns every failure joined. Sync never
// modifies members, and is idempotent: retrying is safe.
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

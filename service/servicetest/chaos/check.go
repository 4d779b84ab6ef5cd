package chaos

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Report is what [Check] found.
type Report struct {
	// Keys is the number of resources checked.
	Keys int
	// Operations is the number of operations in their histories (those
	// that failed are left out).
	Operations int
	// Illegal lists the resources whose history is not linearizable,
	// sorted, each with the operations that could not be placed (see
	// [Violation]).
	Illegal []Violation
	// Inconclusive lists the resources whose check did not end within
	// the timeout.
	Inconclusive []string
}

// Violation is a resource whose history is not linearizable.
type Violation struct {
	// Key is the resource.
	Key string
	// Placed is how many of its operations the longest linearization
	// found placed in order.
	Placed int
	// First describes the earliest invoked operations left out of that
	// linearization (up to 3): one of them cannot be placed.
	First []string
	// Visualization is the path of porcupine's HTML visualization of the
	// history, if [Check] was given a directory.
	Visualization string
}

// OK reports whether every history checked is linearizable.
func (r Report) OK() bool { return len(r.Illegal) == 0 && len(r.Inconclusive) == 0 }

// String sums r up in a line, and a line per violation.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d resources, %d operations: ", r.Keys, r.Operations)
	if r.OK() {
		b.WriteString("every history linearizable")
		return b.String()
	}
	fmt.Fprintf(&b, "%d not linearizable, %d inconclusive", len(r.Illegal), len(r.Inconclusive))
	for _, v := range r.Illegal {
		fmt.Fprintf(&b, "\n  %s: %d operations placed; cannot place one of: %s", v.Key, v.Placed, strings.Join(v.First, "; "))
		if v.Visualization != "" {
			fmt.Fprintf(&b, " (visualization: %s)", v.Visualization)
		}
	}
	if len(r.Inconclusive) > 0 {
		fmt.Fprintf(&b, "\n  inconclusive: %s", strings.Join(r.Inconclusive, ", "))
	}
	return b.String()
}

// Check checks every resource's history in rec against model, each for
// at most timeout (0: no bound). For a history that is not
// linearizable it writes porcupine's visualization into dir (none if dir
// is ""), named after the resource. It returns an error only if a
// visualization could not be written.
func Check(model porcupine.Model, rec *Recorder, timeout time.Duration, dir string) (Report, error) {
	var r Report
	var errs []error
	for _, key := range rec.Keys() {
		ops := rec.Operations(key)
		r.Keys++
		r.Operations += len(ops)
		res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
		switch res {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			r.Inconclusive = append(r.Inconclusive, key)
			continue
		}
		v := violation(model, key, ops, info)
		if dir != "" {
			path := filepath.Join(dir, "chaos-"+safeName(key)+".html")
			if err := porcupine.VisualizePath(model, info, path); err != nil {
				errs = append(errs, fmt.Errorf("chaos: write the visualization of %s: %w", key, err))
			} else {
				v.Visualization = path
			}
		}
		r.Illegal = append(r.Illegal, v)
	}
	return r, errors.Join(errs...)
}

// violation describes key's illegal history: the longest partial
// linearization, and the earliest operations it leaves out.
func violation(model porcupine.Model, key string, ops []porcupine.Operation, info porcupine.LinearizationInfo) Violation {
	v := Violation{Key: key}
	placed := map[int]bool{}
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) > v.Placed {
				v.Placed = len(lin)
				clear(placed)
				for _, id := range lin {
					placed[id] = true
				}
			}
		}
	}
	order := make([]int, 0, len(ops))
	for i := range ops {
		if !placed[i] {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return int(ops[a].Call - ops[b].Call) })
	for _, i := range order[:min(3, len(order))] {
		o := ops[i]
		v.First = append(v.First, fmt.Sprintf("client %d: %s", o.ClientId, model.DescribeOperation(o.Input, o.Output)))
	}
	return v
}

// safeName keeps the letters, digits, dots and dashes of key.
func safeName(key string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, key)
}

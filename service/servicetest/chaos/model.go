package chaos

import (
	"fmt"
	"hash/maphash"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

var seed = maphash.MakeSeed()

// Model returns the porcupine model of one resource whose sequential
// behaviour is step: from state s, input in leads to the next state and
// returns an output. The histories it checks are [Recorder.Operations]'s:
// Inputs of type I, Outputs [Result]s whose Value is an O. An operation
// that returned must have returned exactly step's output at its instant;
// one whose outcome is unknown may have taken effect (whatever it
// returned) or not. step must be a pure function: no randomness, no
// clock.
func Model[S comparable, I any, O comparable](init S, step func(s S, in I) (S, O)) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{init} },
		Step: func(state, input, output any) []any {
			s, in, res := state.(S), input.(I), output.(Result)
			next, out := step(s, in)
			if res.Unknown {
				if next == s {
					return []any{s}
				}
				return []any{s, next} // taken effect or not
			}
			if got, ok := res.Value.(O); ok && got == out {
				return []any{next}
			}
			return nil
		},
		Equal: func(a, b any) bool { return a.(S) == b.(S) },
		Hash:  func(s any) uint64 { return maphash.Comparable(seed, s.(S)) },
		DescribeOperation: func(input, output any) string {
			res := output.(Result)
			if res.Unknown {
				return fmt.Sprintf("%v -> unknown", input)
			}
			return fmt.Sprintf("%v -> %v", input, res.Value)
		},
		DescribeState: func(state any) string { return fmt.Sprintf("%v", state) },
	}
	return nm.ToModel()
}

// RegisterKind is the kind of a [RegisterOp].
type RegisterKind int

// The register operations.
const (
	// Read returns the register's value.
	Read RegisterKind = iota + 1
	// Write sets the value.
	Write
	// CAS sets the value to Value if it is Expect, and returns whether it
	// did.
	CAS
)

// String returns "read", "write", "cas", or "RegisterKind(n)".
func (k RegisterKind) String() string {
	switch k {
	case Read:
		return "read"
	case Write:
		return "write"
	case CAS:
		return "cas"
	}
	return fmt.Sprintf("RegisterKind(%d)", int(k))
}

// RegisterOp is an operation on a register, the Input of [Register]'s
// histories.
type RegisterOp struct {
	// Kind is the operation.
	Kind RegisterKind
	// Value is what a Write or a CAS writes. Make every written value
	// unique in a history: only then does a read say which write it saw.
	Value string
	// Expect is the value a CAS compares with.
	Expect string
}

// String describes op as "read()", "write(v)" or "cas(e, v)".
func (op RegisterOp) String() string {
	switch op.Kind {
	case Read:
		return "read()"
	case Write:
		return fmt.Sprintf("write(%q)", op.Value)
	case CAS:
		return fmt.Sprintf("cas(%q, %q)", op.Expect, op.Value)
	}
	return fmt.Sprintf("RegisterKind(%d)", int(op.Kind))
}

// RegisterOutput is what a register operation returned, the Value of its
// [Result]: a Read's value, a CAS's Swapped; the zero value for a Write.
type RegisterOutput struct {
	// Value is what a Read returned.
	Value string
	// Swapped is whether a CAS wrote.
	Swapped bool
}

// String describes out as a violation shows it: "swapped" for a CAS
// that wrote, else the value read, quoted ("" for a write, or a CAS
// that did not).
func (out RegisterOutput) String() string {
	if out.Swapped {
		return "swapped"
	}
	return fmt.Sprintf("%q", out.Value)
}

// Register returns the model of a register holding init at first, with
// reads, writes and compare-and-set ([RegisterOp], [RegisterOutput]).
func Register(init string) porcupine.Model {
	return Model(init, func(s string, op RegisterOp) (string, RegisterOutput) {
		switch op.Kind {
		case Read:
			return s, RegisterOutput{Value: s}
		case Write:
			return op.Value, RegisterOutput{}
		case CAS:
			if s == op.Expect {
				return op.Value, RegisterOutput{Swapped: true}
			}
			return s, RegisterOutput{}
		}
		return s, RegisterOutput{Value: "invalid operation " + op.String()}
	})
}

// CounterOp is an operation on a counter, the Input of [Counter]'s
// histories: add Add (which may be negative), or read it if Add is 0.
type CounterOp struct {
	// Add is what to add; 0 reads the counter.
	Add int64
}

// String describes op as "add(n)" or "read()".
func (op CounterOp) String() string {
	if op.Add == 0 {
		return "read()"
	}
	return fmt.Sprintf("add(%d)", op.Add)
}

// Counter returns the model of a counter starting at init: an add
// returns the zero int64, a read the counter's value (the Values of the
// [Result]s are int64s). A counter's history catches a lost increment and
// one applied twice once a read shows it.
func Counter(init int64) porcupine.Model {
	return Model(init, func(s int64, op CounterOp) (int64, int64) {
		if op.Add == 0 {
			return s, s
		}
		return s + op.Add, 0
	})
}

// SetOp is an operation on a set of strings, the Input of [Set]'s
// histories: add Add, or read the set if Add is "".
type SetOp struct {
	// Add is the element to add; "" reads the set.
	Add string
}

// String describes op as "add(e)" or "read()".
func (op SetOp) String() string {
	if op.Add == "" {
		return "read()"
	}
	return fmt.Sprintf("add(%q)", op.Add)
}

// SetValue is how a read of a [Set] is recorded: its elements sorted,
// each once, joined by newlines ("" for the empty set).
func SetValue(elems []string) string {
	s := slices.Clone(elems)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), "\n")
}

// Set returns the model of a set of strings, empty at first: an add
// returns "", a read the set's [SetValue] (the Values of the [Result]s
// are strings; no element may contain a newline). A set's history
// catches an acknowledged add lost, and one that shows up before it was
// invoked.
func Set() porcupine.Model {
	return Model("", func(s string, op SetOp) (string, string) {
		if op.Add == "" {
			return s, s
		}
		var elems []string
		if s != "" {
			elems = strings.Split(s, "\n")
		}
		return SetValue(append(elems, op.Add)), ""
	})
}

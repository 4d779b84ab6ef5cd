package chaoscheck

import (
	"fmt"
	"hash/maphash"

	"github.com/anishathalye/porcupine"

	"github.com/cloudbus-go/cloudbus/service/servicetest/chaos"
)

// Kind is the kind of a register operation: the chaos kit's.
type Kind = chaos.RegisterKind

// The register operations.
const (
	// Read returns the register's value.
	Read = chaos.Read
	// Write sets the value.
	Write = chaos.Write
	// CAS sets the value to Input.Value if it is Input.Expect, and
	// returns whether it did (Output.Swapped).
	CAS = chaos.CAS
)

// Input is a register operation as a client invoked it.
type Input struct {
	// Kind is the operation.
	Kind Kind
	// Value is what a Write or a CAS writes. Make every written value
	// unique in a history: only then does a read say which write it saw.
	Value string
	// Expect is the value a CAS compares with.
	Expect string
}

// Output is what an operation returned.
type Output struct {
	// Value is what a Read returned.
	Value string
	// Swapped is whether a CAS wrote.
	Swapped bool
	// Unknown is set when the outcome is unknown: the operation may or
	// may not have taken effect, and Value and Swapped mean nothing.
	Unknown bool
}

var seed = maphash.MakeSeed()

// Register returns the sequential specification of a register holding
// init at first, for porcupine's checkers (porcupine.CheckOperations and
// the like): operations with an [Input] and an [Output]. An operation
// whose Output is Unknown may or may not take effect; a Read with an
// unknown outcome constrains nothing. The model is safe for concurrent
// use.
func Register(init string) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{init} },
		Step: func(state, input, output any) []any {
			return step(state.(string), input.(Input), output.(Output))
		},
		Equal: func(a, b any) bool { return a.(string) == b.(string) },
		Hash:  func(s any) uint64 { return maphash.String(seed, s.(string)) },
		DescribeOperation: func(input, output any) string {
			return describe(input.(Input), output.(Output))
		},
		DescribeState: func(state any) string { return fmt.Sprintf("%q", state) },
	}
	return nm.ToModel()
}

// step returns every state the register may be in after in returned out
// from state s; none if it cannot have.
func step(s string, in Input, out Output) []any {
	switch in.Kind {
	case Read:
		if out.Unknown || out.Value == s {
			return []any{s}
		}
	case Write:
		if out.Unknown {
			return []any{s, in.Value} // taken effect or not
		}
		return []any{in.Value}
	case CAS:
		match := s == in.Expect
		switch {
		case out.Unknown && match:
			return []any{s, in.Value}
		case out.Unknown, !match && !out.Swapped:
			return []any{s}
		case match && out.Swapped:
			return []any{in.Value}
		}
	}
	return nil
}

func describe(in Input, out Output) string {
	var call, ret string
	switch in.Kind {
	case Read:
		call, ret = "read()", fmt.Sprintf("%q", out.Value)
	case Write:
		call, ret = fmt.Sprintf("write(%q)", in.Value), "ok"
	case CAS:
		call, ret = fmt.Sprintf("cas(%q, %q)", in.Expect, in.Value), fmt.Sprint(out.Swapped)
	default:
		call, ret = in.Kind.String(), "?"
	}
	if out.Unknown {
		ret = "unknown"
	}
	return call + " -> " + ret
}

package chaoscheck_test

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cloudbus-go/cloudbus/refnode/internal/chaoscheck"
)

// Two clients share a register. The first writes "a"; the second's
// compare-and-set from "a" to "b" times out, so nobody knows whether it
// swapped; a read then shows "b": it did, before its deadline. A read of
// "a" after a later write of "c" would not be linearizable.
func Example() {
	r := chaoscheck.NewRecorder(nil)
	op := r.Invoke(0, chaoscheck.Input{Kind: chaoscheck.Write, Value: "a"})
	r.Return(op, chaoscheck.Output{})
	op = r.Invoke(1, chaoscheck.Input{Kind: chaoscheck.CAS, Expect: "a", Value: "b"})
	r.Unknown(op, time.Now()) // the caller's deadline passed without a reply
	op = r.Invoke(0, chaoscheck.Input{Kind: chaoscheck.Read})
	r.Return(op, chaoscheck.Output{Value: "b"})
	fmt.Println(porcupine.CheckOperations(chaoscheck.Register(""), r.Operations()))

	op = r.Invoke(1, chaoscheck.Input{Kind: chaoscheck.Write, Value: "c"})
	r.Return(op, chaoscheck.Output{})
	op = r.Invoke(0, chaoscheck.Input{Kind: chaoscheck.Read})
	r.Return(op, chaoscheck.Output{Value: "a"})
	fmt.Println(porcupine.CheckOperations(chaoscheck.Register(""), r.Operations()))
	// Output:
	// true
	// false
}

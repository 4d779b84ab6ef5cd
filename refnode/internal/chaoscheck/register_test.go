package chaoscheck_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/refnode/internal/chaoscheck"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// op is a history entry written by hand: input, output, call and return.
func op(client int, in chaoscheck.Input, out chaoscheck.Output, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
}

func write(v string) chaoscheck.Input { return chaoscheck.Input{Kind: chaoscheck.Write, Value: v} }
func read() chaoscheck.Input          { return chaoscheck.Input{Kind: chaoscheck.Read} }
func cas(from, to string) chaoscheck.Input {
	return chaoscheck.Input{Kind: chaoscheck.CAS, Expect: from, Value: to}
}

var (
	ok      = chaoscheck.Output{}
	unknown = chaoscheck.Output{Unknown: true}
)

func got(v string) chaoscheck.Output   { return chaoscheck.Output{Value: v} }
func swapped(b bool) chaoscheck.Output { return chaoscheck.Output{Swapped: b} }

// TestRegister checks the model on histories written by hand: the
// linearizable ones pass and each kind of violation the chaos test looks
// for is caught.
func TestRegister(t *testing.T) {
	for _, c := range []struct {
		name    string
		history []porcupine.Operation
		legal   bool
	}{
		{"sequential", []porcupine.Operation{
			op(0, read(), got(""), 0, 1),
			op(0, write("a"), ok, 2, 3),
			op(1, read(), got("a"), 4, 5),
			op(1, cas("a", "b"), swapped(true), 6, 7),
			op(0, cas("a", "c"), swapped(false), 8, 9),
			op(0, read(), got("b"), 10, 11),
		}, true},
		{"the old value read after the new one, both during the write", []porcupine.Operation{
			op(0, write("a"), ok, 0, 10),
			op(1, read(), got("a"), 1, 2),
			op(2, read(), got(""), 3, 4),
		}, false},
		{"the new value read after the old one, both during the write", []porcupine.Operation{
			op(0, write("a"), ok, 0, 10),
			op(1, read(), got(""), 1, 2),
			op(2, read(), got("a"), 3, 4),
		}, true},
		{"stale read", []porcupine.Operation{
			op(0, write("a"), ok, 0, 1),
			op(0, write("b"), ok, 2, 3),
			op(1, read(), got("a"), 4, 5),
		}, false},
		{"lost write", []porcupine.Operation{
			op(0, write("a"), ok, 0, 1),
			op(1, read(), got(""), 2, 3),
		}, false},
		{"double execution", []porcupine.Operation{
			op(0, write("a"), ok, 0, 1),
			op(0, write("b"), ok, 2, 3),
			op(1, read(), got("b"), 4, 5),
			op(1, read(), got("a"), 6, 7),
		}, false},
		{"a value nobody wrote", []porcupine.Operation{
			op(0, read(), got("z"), 0, 1),
		}, false},
		{"cas swapped from a value the register did not hold", []porcupine.Operation{
			op(0, cas("x", "y"), swapped(true), 0, 1),
		}, false},
		{"cas refused while the value matched", []porcupine.Operation{
			op(0, write("a"), ok, 0, 1),
			op(1, cas("a", "b"), swapped(false), 2, 3),
		}, false},
		{"an unknown write that did not take effect", []porcupine.Operation{
			op(0, write("a"), unknown, 0, 5),
			op(1, read(), got(""), 6, 7),
		}, true},
		{"an unknown write that took effect", []porcupine.Operation{
			op(0, write("a"), unknown, 0, 5),
			op(1, read(), got("a"), 6, 7),
		}, true},
		{"an unknown write that took effect after its deadline (late execution)", []porcupine.Operation{
			op(0, write("a"), unknown, 0, 5), // 5: the caller's deadline
			op(1, write("b"), ok, 6, 7),
			op(1, read(), got("a"), 8, 9),
		}, false},
		{"an unknown cas, either way", []porcupine.Operation{
			op(0, cas("", "x"), unknown, 0, 5),
			op(1, read(), got(""), 1, 2),
			op(1, read(), got("x"), 6, 7),
		}, true},
		{"an unknown cas cannot swap from another value", []porcupine.Operation{
			op(0, write("a"), ok, 0, 1),
			op(1, cas("", "x"), unknown, 2, 5),
			op(1, read(), got("x"), 6, 7),
		}, false},
		{"an unknown read constrains nothing", []porcupine.Operation{
			op(0, write("a"), ok, 0, 1),
			op(1, read(), unknown, 2, 3),
		}, true},
		{"an operation of no kind", []porcupine.Operation{
			op(0, chaoscheck.Input{}, ok, 0, 1),
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := porcupine.CheckOperationsTimeout(chaoscheck.Register(""), c.history, 10*time.Second)
			want := map[bool]porcupine.CheckResult{true: porcupine.Ok, false: porcupine.Illegal}[c.legal]
			assert.Equal(t, want, res, "linearizable: %t", c.legal)
		})
	}
}

func TestRegisterInit(t *testing.T) {
	h := []porcupine.Operation{op(0, read(), got("first"), 0, 1)}
	assert.True(t, porcupine.CheckOperations(chaoscheck.Register("first"), h))
	assert.False(t, porcupine.CheckOperations(chaoscheck.Register(""), h))
}

func TestKindString(t *testing.T) {
	assert.Equal(t, "read", chaoscheck.Read.String())
	assert.Equal(t, "write", chaoscheck.Write.String())
	assert.Equal(t, "cas", chaoscheck.CAS.String())
	assert.Equal(t, "RegisterKind(9)", chaoscheck.Kind(9).String())
}

func TestDescribe(t *testing.T) {
	m := chaoscheck.Register("")
	assert.Equal(t, `write("a") -> ok`, m.DescribeOperation(write("a"), ok))
	assert.Equal(t, `cas("a", "b") -> true`, m.DescribeOperation(cas("a", "b"), swapped(true)))
	assert.Equal(t, `read() -> "a"`, m.DescribeOperation(read(), got("a")))
	assert.Equal(t, `cas("a", "b") -> unknown`, m.DescribeOperation(cas("a", "b"), unknown))
}

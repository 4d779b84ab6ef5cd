package message_test

import (
	"regexp"
	"testing"

	"github.com/cloudbus-go/cloudbus/message"
)

// typeNamePattern is ValidTypeName's contract as its doc writes it.
var typeNamePattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z][A-Za-z0-9_-]*)*\.v[0-9]+\.[A-Za-z][A-Za-z0-9_]*$`)

// FuzzValidTypeName: the hand-written check of an envelope's type name
// (every received envelope runs it) agrees with the regular expression
// and the 128-byte limit its documentation states.
func FuzzValidTypeName(f *testing.F) {
	for _, s := range []string{
		"refnode.v1.StartVm", "cloudbus.v1.NodeJoined", "a-b.c_d.v12.X_1", "x.v0.Y",
		"v1.StartVm", "refnode.v1.Start-Vm", "refnode.V1.StartVm", "refnode.v.StartVm", "refnode.v1.", ".v1.X",
		"a..v1.X", "1a.v1.X", "a.v1.1X", "a.v1.X\n", "a.v1.X.", "ä.v1.X", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		want := len(name) <= 128 && typeNamePattern.MatchString(name)
		if got := message.ValidTypeName(name); got != want {
			t.Fatalf("ValidTypeName(%q) = %v, its documented pattern says %v", name, got, want)
		}
	})
}

package ring_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/ring/ringtest"
)

func TestFingerprintOf(t *testing.T) {
	members := ringtest.UUIDs(1, 20)
	kept := slices.Clone(members)
	fp := ring.FingerprintOf(members)
	assert.Equal(t, kept, members, "FingerprintOf must not modify its argument")

	rev := slices.Clone(members)
	slices.Reverse(rev)
	assert.Equal(t, fp, ring.FingerprintOf(rev), "order must not matter")
	assert.Equal(t, fp, ring.FingerprintOf(append(rev, members[3], members[0])), "duplicates must not matter")
	assert.NotEqual(t, fp, ring.FingerprintOf(members[1:]), "different members must differ")

	assert.NotEqual(t, ring.FingerprintOf([]string{"ab", "c"}), ring.FingerprintOf([]string{"a", "bc"}),
		"member boundaries must be unambiguous")
	assert.NotEqual(t, ring.FingerprintOf([]string{"a"}), ring.FingerprintOf([]string{"a", ""}),
		"an empty name is a distinct member")
	assert.NotEqual(t, ring.FingerprintOf(nil), ring.FingerprintOf([]string{""}))
	assert.Equal(t, ring.FingerprintOf(nil), ring.FingerprintOf([]string{}))
}

func TestFingerprintString(t *testing.T) {
	assert.Equal(t, "0000000000000abc", ring.Fingerprint(0xabc).String())
	assert.Equal(t, "ffffffffffffffff", ring.Fingerprint(1<<64-1).String())
	assert.Regexp(t, `^[0-9a-f]{16}$`, ring.FingerprintOf(ringtest.UUIDs(1, 3)).String())
}

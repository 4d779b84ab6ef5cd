package ringtest_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/ring/ringtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRunDefaultRing runs the suite against the default ring, so the suite
// itself is exercised in this package. The default ring bounds each
// member's load, so it declares ExtraMovement; ring's
// TestCustomRingConformance runs the strictest contract against plain
// rendezvous hashing.
func TestRunDefaultRing(t *testing.T) {
	ringtest.RunWithFeatures(t, func(t *testing.T) ring.Ring {
		r, err := ring.New(ring.Config{})
		require.NoError(t, err)
		return r
	}, ringtest.Features{ExtraMovement: true})
}

func TestUUIDs(t *testing.T) {
	a := ringtest.UUIDs(42, 1000)
	assert.Equal(t, a, ringtest.UUIDs(42, 1000), "the same seed must give the same UUIDs")
	assert.NotEqual(t, a, ringtest.UUIDs(43, 1000), "different seeds must give different UUIDs")
	seen := map[string]bool{}
	for _, u := range a {
		assert.Regexp(t, `^[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}$`, u, "canonical version-4 UUID")
		assert.False(t, seen[u], "duplicate %s", u)
		seen[u] = true
	}
	assert.Empty(t, ringtest.UUIDs(1, 0))
}

func ExampleUUIDs() {
	for _, u := range ringtest.UUIDs(1, 3) {
		fmt.Println(u)
	}
	// Output:
	// 67ba6070b24c4e6bacbde7a5e26f1c98
	// cc7500bb267b4b068de0ade457f7b0d4
	// 6bf928378ddc48bd9ad6318f9d88a4bd
}

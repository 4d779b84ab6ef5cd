package ring_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/ring/ringtest"
)

// Both rings bound each member's load, and move keys between members that
// stay when the bound cascades; they declare so instead of skipping cases.
// TestDefaultRingBalance bounds the Table's movement in all.

func TestTableConformance(t *testing.T) {
	ringtest.RunWithFeatures(t, func(t *testing.T) ring.Ring {
		r, err := ring.New(ring.Config{})
		require.NoError(t, err)
		return r
	}, ringtest.Features{ExtraMovement: true})
}

func TestTableSmallConformance(t *testing.T) {
	skipSameCodeUnderRace(t)
	ringtest.RunWithFeatures(t, func(t *testing.T) ring.Ring {
		r, err := ring.New(ring.Config{Partitions: 1 << 10})
		require.NoError(t, err)
		return r
	}, ringtest.Features{ExtraMovement: true})
}

func TestZeroTableConformance(t *testing.T) {
	skipSameCodeUnderRace(t)
	ringtest.RunWithFeatures(t, func(t *testing.T) ring.Ring { return new(ring.Table) },
		ringtest.Features{ExtraMovement: true})
}

func TestConsistentConformance(t *testing.T) {
	ringtest.RunWithFeatures(t, func(t *testing.T) ring.Ring {
		r, err := ring.NewConsistent(ring.ConsistentConfig{})
		require.NoError(t, err)
		return r
	}, ringtest.Features{ExtraMovement: true})
}

// skipSameCodeUnderRace skips, under the race detector, a conformance run
// of a configuration whose code TestTableConformance already runs there
// (about 15 s each under -race); CI runs it without -race.
func skipSameCodeUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skipf("skipped under -race: TestTableConformance runs the same code there; CI runs it without -race: go test -count=1 -run '^%s$' ./ring", t.Name())
	}
}

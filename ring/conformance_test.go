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
	ringtest.RunWithFeatures(t, func(t *testing.T) ring.Ring {
		r, err := ring.New(ring.Config{Partitions: 1 << 10})
		require.NoError(t, err)
		return r
	}, ringtest.Features{ExtraMovement: true})
}

func TestZeroTableConformance(t *testing.T) {
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

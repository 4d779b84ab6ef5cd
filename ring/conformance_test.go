package ring_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/ring/ringtest"
)

func TestTableConformance(t *testing.T) {
	ringtest.Run(t, func(t *testing.T) ring.Ring {
		r, err := ring.New(ring.Config{})
		require.NoError(t, err)
		return r
	})
}

func TestTableSmallConformance(t *testing.T) {
	ringtest.Run(t, func(t *testing.T) ring.Ring {
		r, err := ring.New(ring.Config{Partitions: 1 << 10})
		require.NoError(t, err)
		return r
	})
}

func TestZeroTableConformance(t *testing.T) {
	ringtest.Run(t, func(t *testing.T) ring.Ring { return new(ring.Table) })
}

// The buraksezer ring moves keys between members that stay when its load
// bound cascades; it declares so instead of skipping cases.
func TestConsistentConformance(t *testing.T) {
	ringtest.RunWithFeatures(t, func(t *testing.T) ring.Ring {
		r, err := ring.NewConsistent(ring.ConsistentConfig{})
		require.NoError(t, err)
		return r
	}, ringtest.Features{ExtraMovement: true})
}

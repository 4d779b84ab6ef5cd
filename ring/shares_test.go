package ring_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/ring"
)

// TestShares: a Table's shares are exact and add up to 1; a ring that
// is no Sharer gets estimates within 1.5 % of the key space of the
// Table's; an empty ring has none.
func TestShares(t *testing.T) {
	tab, err := ring.New(ring.DefaultConfig())
	require.NoError(t, err)
	assert.Nil(t, ring.Shares(tab))
	con, err := ring.NewConsistent(ring.DefaultConsistentConfig())
	require.NoError(t, err)
	assert.Nil(t, ring.Shares(con))
	for i := range 5 {
		m := fmt.Sprintf("%032x", i+1)
		require.NoError(t, tab.Add(m))
		require.NoError(t, con.Add(m))
	}
	exact := ring.Shares(tab)
	require.Len(t, exact, 5)
	sum := 0.0
	for _, s := range exact {
		sum += s
		assert.InDelta(t, 0.2, s, 0.02, "balanced")
	}
	assert.InDelta(t, 1, sum, 1e-9)

	est := ring.Shares(con)
	require.Len(t, est, 5)
	sum = 0
	for m, s := range est {
		sum += s
		// the estimate of the consistent ring against its own exact share,
		// counted over 1,000,000 keys
		n := 0
		for k := range 1_000_000 {
			if o, _ := con.Locate(fmt.Sprintf("%x", uint64(k)*0x9e3779b97f4a7c15)); o == m {
				n++
			}
		}
		assert.InDelta(t, float64(n)/1e6, s, 0.015, "member %s", m)
	}
	assert.InDelta(t, 1, sum, 1e-9)
	assert.False(t, math.IsNaN(sum))
}

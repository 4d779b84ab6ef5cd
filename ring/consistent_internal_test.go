package ring

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConsistentLocateMatchesLibrary checks that the allocation-free Locate
// agrees with the library's own LocateKey.
func TestConsistentLocateMatchesLibrary(t *testing.T) {
	c, err := NewConsistent(ConsistentConfig{})
	require.NoError(t, err)
	require.NoError(t, Sync(c, names("node", 10)))
	lib := c.lib.Load()
	for i := range 5000 {
		key := fmt.Sprintf("key-%d", i)
		got, err := c.Locate(key)
		require.NoError(t, err)
		want := lib.LocateKey([]byte(key)).(*consistentMember).name
		require.Equal(t, want, got, "key %s", key)
	}
}

// TestConsistentNeverPanics walks small configurations to their capacity:
// every call must return normally, and Add must fail with
// ErrTooManyMembers exactly when the library could not place the
// partitions.
func TestConsistentNeverPanics(t *testing.T) {
	for _, parts := range []int{1, 2, 3, 7, 13} {
		for _, rf := range []int{2, 3} {
			for _, load := range []float64{1.0001, 1.25, 2} {
				cfg := ConsistentConfig{PartitionCount: parts, ReplicationFactor: rf, Load: load}
				t.Run(fmt.Sprintf("p=%d/rf=%d/load=%v", parts, rf, load), func(t *testing.T) {
					c, err := NewConsistent(cfg)
					require.NoError(t, err)
					ms := names("m", parts+2)
					added := 0
					for _, m := range ms {
						if err := c.Add(m); err != nil {
							require.ErrorIs(t, err, ErrTooManyMembers)
							break
						}
						added++
						_, err := c.Locate("k")
						require.NoError(t, err)
					}
					assert.GreaterOrEqual(t, added, 1, "one member always fits")
					assert.LessOrEqual(t, added, parts, "a member without partitions cannot be placed")
					require.ErrorIs(t, c.Replace(ms), ErrTooManyMembers)
					for _, m := range ms[:added] {
						require.NoError(t, c.Remove(m))
					}
					_, err = c.Locate("k")
					require.ErrorIs(t, err, ErrEmpty)
				})
			}
		}
	}
}

// TestConsistentPrefixNames adds names whose virtual-node keys would collide
// without the NUL suffix ("a"+"10" and "a1"+"0"); the library would panic on
// Remove.
func TestConsistentPrefixNames(t *testing.T) {
	c, err := NewConsistent(ConsistentConfig{ReplicationFactor: 20})
	require.NoError(t, err)
	for _, m := range []string{"a", "a1", "a10"} {
		require.NoError(t, c.Add(m))
	}
	for _, m := range []string{"a1", "a", "a10"} {
		require.NoError(t, c.Remove(m))
	}
}

func TestConsistentConfigValidate(t *testing.T) {
	require.NoError(t, ConsistentConfig{}.Validate(), "the zero config is valid")
	require.NoError(t, DefaultConsistentConfig().Validate())
	require.NoError(t, BalancedConsistentConfig().Validate())
	err := ConsistentConfig{PartitionCount: -1, ReplicationFactor: 1, Load: 1}.Validate()
	require.Error(t, err)
	for _, field := range []string{"PartitionCount", "ReplicationFactor", "Load"} {
		assert.Contains(t, err.Error(), field, "Validate must report every problem")
	}
	for _, bad := range []ConsistentConfig{
		{PartitionCount: MaxConsistentPartitions + 1},
		{ReplicationFactor: MaxConsistentReplicationFactor + 1},
		{Load: 0.5},
		{Load: math.NaN()},
		{Load: math.Inf(1)},
	} {
		_, err := NewConsistent(bad)
		assert.Error(t, err, "NewConsistent(%+v) must fail, not panic later", bad)
	}
	var zero Consistent
	require.NoError(t, zero.Add("a"), "the zero Consistent is usable")
	got, err := zero.Locate("k")
	require.NoError(t, err)
	assert.Equal(t, "a", got)
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, Config{}.Validate(), "the zero config is valid")
	require.NoError(t, DefaultConfig().Validate())
	for _, ok := range []int{1, 2, 1 << 10, MaxPartitions} {
		require.NoError(t, Config{Partitions: ok}.Validate(), "partitions=%d", ok)
	}
	err := Config{Partitions: MaxPartitions + 1}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "at most")
	assert.Contains(t, err.Error(), "power of two", "Validate must report every problem")
	assert.ErrorContains(t, Config{Partitions: -3}.Validate(), "negative")
	for _, bad := range []int{3, 1000, MaxPartitions * 2} {
		_, err := New(Config{Partitions: bad})
		assert.Error(t, err, "partitions=%d", bad)
	}
}

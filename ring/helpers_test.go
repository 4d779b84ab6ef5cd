package ring_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cloudbus-go/cloudbus/ring"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// impl is one ring implementation under test or benchmark.
type impl struct {
	name string
	new  func(t testing.TB) ring.Ring
}

// newTable returns a default ring.
func newTable(t testing.TB) ring.Ring {
	r, err := ring.New(ring.Config{})
	require.NoError(t, err)
	return r
}

// newConsistent returns a constructor for buraksezer rings with cfg.
func newConsistent(cfg ring.ConsistentConfig) func(t testing.TB) ring.Ring {
	return func(t testing.TB) ring.Ring {
		r, err := ring.NewConsistent(cfg)
		require.NoError(t, err)
		return r
	}
}

// impls lists the implementations compared side by side in benchmarks.
var impls = []impl{
	{"default", newTable},
	{"buraksezer-defaults", newConsistent(ring.DefaultConsistentConfig())},
	{"buraksezer-balanced", newConsistent(ring.BalancedConsistentConfig())},
}

// heapBytes returns how many heap bytes one ring returned by build retains,
// measured with runtime.MemStats around a forced GC. It keeps copies rings
// alive at once and divides, so unrelated frees during the measurement
// barely matter. Allocations made before the call (such as the member
// strings) are not counted.
func heapBytes(copies int, build func() ring.Ring) uint64 {
	var before, after runtime.MemStats
	rings := make([]ring.Ring, 0, copies)
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range copies {
		rings = append(rings, build())
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(rings)
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return (after.HeapAlloc - before.HeapAlloc) / uint64(copies)
}

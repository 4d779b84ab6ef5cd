package ring_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cloudbus-go/cloudbus/ring"
	"github.com/cloudbus-go/cloudbus/ring/ringtest"
)

// benchMembers is the cluster size of the build, change and memory budgets.
const benchMembers = 100

// BenchmarkBuild measures building a ring of 100 members from scratch in one
// step with ring.Sync (which uses Replace). Budget for the default: 100 ms.
func BenchmarkBuild(b *testing.B) {
	defer ring.ComputeEveryChange()()
	members := ringtest.UUIDs(1, benchMembers)
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			for b.Loop() {
				require.NoError(b, ring.Sync(im.new(b), members))
			}
		})
	}
}

// BenchmarkBuildByAdd measures building a ring of 100 members with one Add
// per member, as a node does when members join one at a time.
func BenchmarkBuildByAdd(b *testing.B) {
	defer ring.ComputeEveryChange()()
	members := ringtest.UUIDs(1, benchMembers)
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			for b.Loop() {
				r := im.new(b)
				for _, m := range members {
					require.NoError(b, r.Add(m))
				}
			}
		})
	}
}

// BenchmarkAddRemove measures one Add and one Remove on a ring of 100
// members; add-ns/op and remove-ns/op split the time. Budget for the
// default: 20 ms each.
func BenchmarkAddRemove(b *testing.B) {
	defer ring.ComputeEveryChange()()
	members := ringtest.UUIDs(1, benchMembers+1)
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			r := im.new(b)
			require.NoError(b, ring.Sync(r, members[:benchMembers]))
			extra := members[benchMembers]
			var add, remove time.Duration
			for b.Loop() {
				t0 := time.Now()
				require.NoError(b, r.Add(extra))
				t1 := time.Now()
				require.NoError(b, r.Remove(extra))
				add += t1.Sub(t0)
				remove += time.Since(t1)
			}
			b.ReportMetric(float64(add.Nanoseconds())/float64(b.N), "add-ns/op")
			b.ReportMetric(float64(remove.Nanoseconds())/float64(b.N), "remove-ns/op")
		})
	}
}

// BenchmarkLocate measures Locate at 3, 10 and 100 members; run with
// -benchmem to see 0 allocs/op.
func BenchmarkLocate(b *testing.B) {
	keys := ringtest.UUIDs(7, 4096)
	for _, n := range []int{3, 10, 100} {
		members := ringtest.UUIDs(1, n)
		for _, im := range impls {
			b.Run(fmt.Sprintf("%s/members=%d", im.name, n), func(b *testing.B) {
				r := im.new(b)
				require.NoError(b, ring.Sync(r, members))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, err := r.Locate(keys[i&(len(keys)-1)]); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

// BenchmarkCopyBytes reports the heap bytes one ring of 100 members
// retains (bytes/copy; each node holds one copy). Budget for the default:
// 1 MB.
func BenchmarkCopyBytes(b *testing.B) {
	defer ring.ComputeEveryChange()()
	members := ringtest.UUIDs(1, benchMembers)
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			var total uint64
			n := 0
			for b.Loop() {
				total += heapBytes(1, func() ring.Ring {
					r := im.new(b)
					require.NoError(b, ring.Sync(r, members))
					return r
				})
				n++
			}
			b.ReportMetric(float64(total)/float64(n), "bytes/copy")
		})
	}
}

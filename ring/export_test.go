package ring

// ComputeEveryChange makes every Table of this test process compute each
// change itself, without the process's shared snapshots, until the
// returned function is called: for the benchmarks that time the
// computation.
func ComputeEveryChange() (restore func()) {
	was := shared.off.Swap(true)
	return func() { shared.off.Store(was) }
}

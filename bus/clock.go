package bus

import "time"

// Clock tells the cluster time, the one clock deadlines are written in
// (docs/wire.md, section 5). A service.Node measures it against the
// heartbeat store and a service.Client through a node; buses on one
// machine may use [LocalClock]. ClusterTime must be safe for concurrent use
// and must not block.
type Clock interface {
	// ClusterTime returns the cluster time as this process estimates it and
	// the bound of the estimate's error; ok is false when it knows none.
	ClusterTime() (now time.Time, bound time.Duration, ok bool)
}

type clockFunc func() (now time.Time, bound time.Duration, ok bool)

// ClusterTime calls f.
func (f clockFunc) ClusterTime() (time.Time, time.Duration, bool) { return f() }

// LocalClock returns a [Clock] reading this machine's clock, with no error:
// for buses on one machine.
func LocalClock() Clock {
	return clockFunc(func() (time.Time, time.Duration, bool) { return time.Now(), 0, true })
}

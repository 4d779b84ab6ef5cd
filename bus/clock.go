package bus

import "time"

// Clock tells the cluster time: the one clock that deadlines are written
// in (wire.Envelope.Deadline), so that a message that waited anywhere
// on its way (a broker queue, a prefetch buffer, the socket of a paused
// process) is known to be late when it is read. A management node's
// clock is its heartbeat monitor's estimate of the heartbeat store's
// clock; a service.Client estimates it through a node; processes on one
// machine may use [LocalClock].
//
// ClusterTime must be safe for concurrent use and must not block.
type Clock interface {
	// ClusterTime returns the cluster time as this process estimates it,
	// and the bound of the estimate's error; ok is false when the
	// process knows no cluster time (then only the relative timeout
	// travels, counted from each message's arrival).
	ClusterTime() (now time.Time, bound time.Duration, ok bool)
}

// clockFunc adapts a function to [Clock].
type clockFunc func() (now time.Time, bound time.Duration, ok bool)

// ClusterTime calls f.
func (f clockFunc) ClusterTime() (time.Time, time.Duration, bool) { return f() }

// LocalClock returns a [Clock] reading this machine's clock as the
// cluster time, with no error: right for buses in one process (tests,
// demos on the in-memory bus) or on one machine. Processes on several
// machines use a measured clock instead (service.Node does).
func LocalClock() Clock {
	return clockFunc(func() (time.Time, time.Duration, bool) { return time.Now(), 0, true })
}

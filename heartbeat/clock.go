package heartbeat

import (
	"sync"
	"time"
)

// ClockSync estimates the time of a reference clock (the cluster clock)
// on this process's clock, NTP-style, from round trips: a sample is a
// local send time, the reference time read in between, and the local
// receive time. The reference time lies within the round trip, so the
// offset is known to half the round trip, plus the reference's own
// resolution or error.
//
// Of the recent samples the one with the smallest error bound wins, its
// bound growing with its age by [MaxClockDrift], so a slow round trip (a
// busy database, a process paused in between) never spoils an estimate
// made from a fast one. Samples older than a minute are dropped.
//
// A ClockSync is safe for concurrent use. The zero value is not usable;
// create one with [NewClockSync].
type ClockSync struct {
	now func() time.Time

	mu      sync.Mutex
	samples [clockSamples]clockSample
	next    int
}

type clockSample struct {
	at     time.Time     // local receive time; zero for an empty slot
	offset time.Duration // reference - local
	bound  time.Duration // error bound of offset at the time of the sample
}

const (
	// clockSamples is how many recent samples a ClockSync keeps.
	clockSamples = 16
	// clockSampleTTL is how long a sample may be used.
	clockSampleTTL = time.Minute
)

// MaxClockDrift is how fast two clocks are assumed to drift apart at
// most: 200 parts per million, twice the tolerance of a common quartz
// oscillator, so an estimate's error bound grows by 0.2 ms per second of
// its age.
const MaxClockDrift = 200e-6

// NewClockSync returns an estimator on the local clock now (time.Now if
// nil).
func NewClockSync(now func() time.Time) *ClockSync {
	if now == nil {
		now = time.Now
	}
	return &ClockSync{now: now}
}

// Sample records one round trip: sent and received on the local clock,
// remote read from the reference clock in between, with remoteErr the
// reference reading's own error bound (its resolution, or the error of
// a reference that is itself an estimate). A sample whose received is
// before sent is ignored.
func (c *ClockSync) Sample(sent, received, remote time.Time, remoteErr time.Duration) {
	rtt := received.Sub(sent)
	if rtt < 0 {
		return
	}
	mid := sent.Add(rtt / 2)
	s := clockSample{at: received, offset: remote.Sub(mid), bound: rtt/2 + max(remoteErr, 0)}
	c.mu.Lock()
	c.samples[c.next] = s
	c.next = (c.next + 1) % clockSamples
	c.mu.Unlock()
}

// Now returns the reference clock's current time as this process
// estimates it, and the bound of the estimate's error. ok is false when
// no sample younger than a minute exists: the cluster time is unknown.
func (c *ClockSync) Now() (now time.Time, bound time.Duration, ok bool) {
	local := c.now()
	offset, bound, ok := c.best(local)
	if !ok {
		return time.Time{}, 0, false
	}
	return local.Add(offset), bound, true
}

// Offset returns the estimated offset of the reference clock to the local
// clock (reference minus local) and its error bound, with ok false when
// the cluster time is unknown, like [ClockSync.Now].
func (c *ClockSync) Offset() (offset, bound time.Duration, ok bool) {
	return c.best(c.now())
}

func (c *ClockSync) best(local time.Time) (offset, bound time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.samples {
		if s.at.IsZero() {
			continue
		}
		age := local.Sub(s.at)
		if age > clockSampleTTL {
			continue
		}
		b := s.bound + time.Duration(float64(max(age, 0))*MaxClockDrift)
		if !ok || b < bound {
			offset, bound, ok = s.offset, b, true
		}
	}
	return offset, bound, ok
}

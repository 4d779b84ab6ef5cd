package heartbeat

import (
	"sync"
	"time"
)

// ClockSync estimates a reference clock from round trips: of its last
// 16 samples under ten minutes old, the one with the smallest error
// bound, grown by [MaxClockDrift] of its age, wins. A sample outlives
// many failed measurements (a broker or database fault can stop them for
// minutes): at 0.2 ms of drift per second, a ten-minute-old sample's
// bound has grown by 120 ms, and a deadline written with that bound is
// still exact to the bound; without a sample, a message carries only
// its time left, which a receiver counts from its arrival. It is safe
// for concurrent use; create one with [NewClockSync].
type ClockSync struct {
	now func() time.Time

	mu      sync.Mutex
	samples [clockSamples]clockSample
	next    int
	held    clockSample // a sample that disagreed with the kept ones; zero if none
}

type clockSample struct {
	at     time.Time     // local receive time; zero for an empty slot
	offset time.Duration // reference - local
	bound  time.Duration // error bound of offset at the time of the sample
}

const (
	clockSamples   = 16
	clockSampleTTL = 10 * time.Minute
)

// MaxClockDrift is the assumed maximum drift between two clocks.
const MaxClockDrift = 200e-6

// NewClockSync returns an estimator on now (nil: time.Now).
func NewClockSync(now func() time.Time) *ClockSync {
	if now == nil {
		now = time.Now
	}
	return &ClockSync{now: now}
}

// Sample records a round trip: sent and received locally, remote read
// in between with error remoteErr. It ignores received before sent.
//
// A sample whose offset disagrees with a kept one by more than both
// their bounds says that a clock stepped (a wall-clock correction), or
// that the remote misread its own clock (a node whose clock just
// stepped reports a bound that does not cover it). It is held aside:
// if the next sample agrees with it, the step is confirmed, the kept
// samples are dropped and the estimate follows the step; if the next
// one agrees with the kept samples instead, the odd one is forgotten.
// So one bad reading never moves the estimate, and a real step moves
// it within two readings instead of for as long as an older sample
// keeps the smaller bound.
func (c *ClockSync) Sample(sent, received, remote time.Time, remoteErr time.Duration) {
	rtt := received.Sub(sent)
	if rtt < 0 {
		return
	}
	mid := sent.Add(rtt / 2)
	s := clockSample{at: received, offset: remote.Sub(mid), bound: rtt/2 + max(remoteErr, 0)}
	c.mu.Lock()
	defer c.mu.Unlock()
	odd := false
	for _, old := range c.samples {
		if !old.at.IsZero() && received.Sub(old.at) <= clockSampleTTL && !agree(s, old) { // an expired one is no estimate to disagree with
			odd = true
			break
		}
	}
	if odd {
		held := c.held
		c.held = s
		if held.at.IsZero() || !agree(s, held) {
			return // held aside until the next sample says which is right
		}
		c.samples, c.next = [clockSamples]clockSample{}, 0 // a step, confirmed
		c.samples[c.next] = held
		c.next++
	}
	c.held = clockSample{}
	c.samples[c.next] = s
	c.next = (c.next + 1) % clockSamples
}

// Doubting reports whether a sample is held aside, waiting for the next
// one to confirm or contradict it: sample again soon (the monitor reads
// the store's clock at its next round).
func (c *ClockSync) Doubting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.held.at.IsZero()
}

// agree reports whether s and an earlier sample e can both be right:
// their offsets differ by no more than their bounds, e's grown by drift
// since it was taken.
func agree(s, e clockSample) bool {
	b := s.bound + e.bound + time.Duration(float64(max(s.at.Sub(e.at), 0))*MaxClockDrift)
	d := s.offset - e.offset
	return d <= b && -d <= b
}

// Now returns the estimated reference time and its error bound; ok is
// false without a sample younger than ten minutes.
func (c *ClockSync) Now() (now time.Time, bound time.Duration, ok bool) {
	local := c.now()
	offset, bound, ok := c.best(local)
	if !ok {
		return time.Time{}, 0, false
	}
	return local.Add(offset), bound, true
}

// Offset returns reference minus local time, its bound and ok, as Now.
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

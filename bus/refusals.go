package bus

import (
	"sync"
	"time"
)

// Logging refused messages without letting a flood of them flood the log.
//
// Every message the bus refuses before a handler runs (undecodable, a
// reply address that is not a reply queue, a kind that has no business
// in the queue) is logged at WARN, for the operator who must find the
// misbehaving sender. Anyone who may publish to a queue can send such
// messages by the thousand; the log then costs more than the refusals.
// The bus logs at most refusalBurst of them at once and refusalRate per
// second after that, and the next one logged says how many were not
// (suppressed). Stats.Rejected counts them all.
const (
	refusalBurst = 20
	refusalRate  = 5 // per second
)

// logLimiter is a token bucket for log lines.
type logLimiter struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

// allow reports whether a line may be logged now, and how many were
// suppressed since the last one allowed.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.IsZero() {
		l.tokens = refusalBurst
	} else {
		l.tokens = min(refusalBurst, l.tokens+now.Sub(l.last).Seconds()*refusalRate)
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return false, 0
	}
	l.tokens--
	n := l.suppressed
	l.suppressed = 0
	return true, n
}

// warnRefused logs a refused message at WARN, within the limits above.
func (b *CloudBus) warnRefused(msg string, args ...any) {
	ok, suppressed := b.refusals.allow(time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	b.log.Warn(msg, args...)
}

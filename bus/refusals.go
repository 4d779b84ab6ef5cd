package bus

import (
	"sync"
	"time"
)

// Refused messages are logged at WARN, at most refusalBurst at once and
// refusalRate a second after that (docs/design.md, "Delivery rules").
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

// warnRefused logs a refused message at WARN, within the limits.
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

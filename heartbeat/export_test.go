package heartbeat

import "time"

// SetInitialDelay fixes the delay before m's first round, so a test can
// choose the phases of its monitors. Call it before Run.
func SetInitialDelay(m *Monitor, d time.Duration) {
	m.initialDelay = func() time.Duration { return d }
}

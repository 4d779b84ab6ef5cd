package servicetest

import "github.com/cloudbus-go/cloudbus/heartbeat"

// MergeHeartbeat exposes mergeHeartbeat, on the in-memory base, to the
// external tests.
func MergeHeartbeat(c heartbeat.Config) heartbeat.Config {
	return mergeHeartbeat(c, heartbeat.TestConfig())
}

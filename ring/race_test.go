//go:build race

package ring_test

// raceEnabled reports whether the race detector is on; slow tests skip then.
const raceEnabled = true

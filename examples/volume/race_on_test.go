//go:build race

package volume_test

// raceEnabled reports whether the test binary runs under -race.
const raceEnabled = true

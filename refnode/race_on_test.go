//go:build race

package main

// raceEnabled reports whether the race detector is on; the fault test
// skips then (its timing bounds assume a binary and a test at full speed).
const raceEnabled = true

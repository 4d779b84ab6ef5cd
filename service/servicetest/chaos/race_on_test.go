//go:build race

package chaos_test

// raceEnabled: the race detector slows the runs about tenfold; the
// tests that repeat a run over many seeds run fewer.
const raceEnabled = true

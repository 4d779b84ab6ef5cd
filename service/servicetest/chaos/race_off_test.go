//go:build !race

package chaos_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false

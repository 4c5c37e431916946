//go:build race

package e2e

// raceEnabled builds the binary under test with the race detector when the tests run
// with -race, so the processes are checked too.
const raceEnabled = true

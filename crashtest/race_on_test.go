//go:build race

package crashtest_test

// raceEnabled: this test binary (and so the Feldera double in it) runs
// under the race detector.
const raceEnabled = true

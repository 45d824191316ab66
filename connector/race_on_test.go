//go:build race

package connector_test

// raceEnabled: this test binary (the connector and the Feldera double in
// it) runs under the race detector.
const raceEnabled = true

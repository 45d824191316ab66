//go:build !race

package connector_test

const raceEnabled = false

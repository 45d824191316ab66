package waitfor

import (
	"testing"
	"time"
)

// The rule, by what Until consulted rather than by the clock: a condition
// that comes to hold is reported; one that never does is given up on,
// after one look at an unmoving mark, or after many looks at a moving one.
func TestUntil(t *testing.T) {
	n := 0
	if !Until(time.Second, time.Millisecond, func() int { return 0 }, func() bool { n++; return n > 3 }) {
		t.Fatal("a condition that comes to hold was reported not to")
	}
	still := 0
	if Until(300*time.Millisecond, 10*time.Millisecond, func() int { still++; return 0 }, func() bool { return false }) {
		t.Fatal("a condition that never holds was reported to")
	}
	moving := 0
	if Until(300*time.Millisecond, 10*time.Millisecond, func() int { moving++; return moving }, func() bool { return false }) {
		t.Fatal("a condition that never holds was reported to")
	}
	// Looks come every 250 ms: an unmoving mark is given up on after the
	// look past within (two looks and the first mark); a moving one keeps
	// the wait going to ten times within (about a dozen looks).
	if still > 3 || moving < 2*still {
		t.Fatalf("marks read: %d unmoving, %d moving: progress did not extend the wait", still, moving)
	}
}

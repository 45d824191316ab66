// Package waitfor holds the tests' one way to wait: as long as the system
// under test makes progress, so a slow machine makes a test slower, not
// red, while a stall still fails it.
package waitfor

import "time"

// Until polls cond every interval until it holds, and gives up once within
// passed without mark changing (a mark of everything a test can see move:
// log lines, requests, steps, the slot's position), or at ten times
// within in all. It reports whether cond held.
func Until[M comparable](within, every time.Duration, mark func() M, cond func() bool) bool {
	start := time.Now()
	last, moved, looked := mark(), start, start
	for !cond() {
		now := time.Now()
		if now.Sub(looked) >= 250*time.Millisecond {
			looked = now
			if m := mark(); m != last {
				last, moved = m, now
			}
		}
		if now.Sub(moved) > within || now.Sub(start) > 10*within {
			return false
		}
		time.Sleep(every)
	}
	return true
}

package replconn

import (
	"testing"
	"time"
)

// The heartbeat rule, step by step: quiet until half the timeout, then
// one request for a reply, then dead at the timeout; a message starts it
// over.
func TestLiveness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := Liveness{Timeout: 10 * time.Second}
	l.HeardAt(t0)
	for _, step := range []struct {
		at        time.Duration
		heard     bool
		ask, dead bool
		lookAgain time.Duration
	}{
		{at: 1 * time.Second, lookAgain: 5 * time.Second},
		{at: 5 * time.Second, ask: true, lookAgain: 10 * time.Second},
		{at: 6 * time.Second, lookAgain: 10 * time.Second}, // asked once per silence
		{at: 9 * time.Second, lookAgain: 10 * time.Second},
		{at: 10 * time.Second, dead: true, lookAgain: 10 * time.Second},
		{at: 11 * time.Second, heard: true, lookAgain: 16 * time.Second}, // a message: over again
		{at: 16 * time.Second, ask: true, lookAgain: 21 * time.Second},
		{at: 17 * time.Second, heard: true, lookAgain: 22 * time.Second}, // the reply
		{at: 22 * time.Second, ask: true, lookAgain: 27 * time.Second},
	} {
		now := t0.Add(step.at)
		if step.heard {
			l.HeardAt(now)
		}
		ask, dead, at := l.Next(now)
		if ask != step.ask || dead != step.dead || !at.Equal(t0.Add(step.lookAgain)) {
			t.Errorf("at %s: ask=%v dead=%v look again at %s; want %v %v %s", step.at, ask, dead, at.Sub(t0), step.ask, step.dead, step.lookAgain)
		}
	}
	if ask, dead, at := (&Liveness{}).Next(t0); ask || dead || !at.IsZero() {
		t.Errorf("no timeout: %v %v %v", ask, dead, at)
	}
	for _, c := range []struct{ setting, server, want time.Duration }{
		{0, 30 * time.Second, 30 * time.Second}, {5 * time.Second, 30 * time.Second, 5 * time.Second}, {0, 0, 60 * time.Second},
	} {
		if got := Timeout(c.setting, c.server); got != c.want {
			t.Errorf("Timeout(%s, %s) = %s, want %s", c.setting, c.server, got, c.want)
		}
	}
}

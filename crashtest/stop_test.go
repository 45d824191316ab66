package crashtest_test

import (
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"syscall"
	"testing"
	"time"
)

// SIGTERM while Feldera holds completion forever: the graceful stop gives
// the in-flight batch STOP_TIMEOUT to complete, then exits 0 having
// acknowledged nothing that did not complete; a restart delivers it all.
func TestStop_BoundedWhileCompletionHeld(t *testing.T) {
	pgcluster.AnyVersion(t)
	// Not parallel: it checks that the slot did not move at all, and on a
	// shared cluster an idle session acknowledges other tests' WAL.
	const stopTimeout = 3 * time.Second
	w := newWorld(t, nil)
	p := w.start("STOP_TIMEOUT=3s")
	seeded(w, p, false)
	w.exec("INSERT INTO users SELECT g, 'acked', g FROM generate_series(1, 50) g")
	if !w.acked(p, 30*time.Second) {
		t.Fatalf("not acknowledged\n%s", w.log())
	}
	acked := w.confirmed()
	w.fel.HoldCompletion(true)
	before := len(w.fel.Requests())
	w.exec("INSERT INTO users SELECT g, 'held', g FROM generate_series(100, 149) g")
	for deadline := time.Now().Add(10 * time.Second); len(w.fel.Requests()) == before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the batch was never posted\n%s", w.log())
		}
	}
	signaled := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	code := p.exited(stopTimeout + 10*time.Second)
	took := time.Since(signaled)
	if code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, w.log())
	}
	if took > stopTimeout+time.Second || took < stopTimeout-500*time.Millisecond {
		t.Fatalf("exited %s after SIGTERM, want about STOP_TIMEOUT (%s)", took.Round(time.Millisecond), stopTimeout)
	}
	if got := w.confirmed(); got != acked {
		t.Fatalf("confirmed_flush_lsn moved from %s to %s although the batch never completed", acked, got)
	}
	w.fel.HoldCompletion(false)
	p2 := w.start()
	if msg := w.caughtUp(p2, 30*time.Second); msg != "" {
		t.Fatal(msg)
	}
	p2.stop(t)
	t.Logf("SIGTERM with completion held: exit 0 after %s (STOP_TIMEOUT %s)", took.Round(time.Millisecond), stopTimeout)
}

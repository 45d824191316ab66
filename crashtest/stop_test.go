package crashtest_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// SIGTERM while Feldera holds completion forever: the graceful stop gives
// the in-flight batch STOP_TIMEOUT to complete, then exits 0 having
// acknowledged nothing that did not complete; a restart delivers it all.
//
// Bounded is shown by what happened, not by a clock: the process exited
// while Feldera still held completion (so it did not wait for it), saying
// STOP_TIMEOUT ended the wait; and not before STOP_TIMEOUT (it gave the
// batch its time, a lower bound a slow machine cannot break).
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
	w.poll("the batch to be posted", 30*time.Second, func() bool { return len(w.fel.Requests()) > before })
	signaled := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	// The stop is silent while it waits: the stall window is stopStall,
	// far longer than STOP_TIMEOUT.
	code := p.exited(stopStall)
	took := time.Since(signaled)
	if code == -1 {
		t.Fatalf("no exit after SIGTERM with completion held: nothing moved for %s\n%s", stopStall, w.log())
	}
	if code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, w.log())
	}
	if !strings.Contains(p.output(), "STOP_TIMEOUT reached") {
		t.Fatalf("the stop did not end on STOP_TIMEOUT, though Feldera held completion throughout\n%s", w.log())
	}
	if took < stopTimeout-500*time.Millisecond {
		t.Fatalf("exited %s after SIGTERM, before STOP_TIMEOUT (%s): the stop did not wait for the batch", took.Round(time.Millisecond), stopTimeout)
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

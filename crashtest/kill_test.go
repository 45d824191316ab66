package crashtest_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// An abrupt kill (SIGKILL: no final status update) redelivers exactly what
// came after the last acknowledgement; a graceful stop redelivers nothing.
// Both counts are measured and printed.
func TestKill_RedeliversOnlyAfterLastAck(t *testing.T) {
	pgcluster.AnyVersion(t)
	// Not parallel: it checks that the slot did not move at all, and on a
	// shared cluster an idle session acknowledges other tests' WAL.
	w := newWorld(t, nil)
	p := w.start()
	seeded(w, p, false)
	for i := 0; i < 20; i++ { // acknowledged transactions
		w.exec(fmt.Sprintf("INSERT INTO users SELECT g, 'acked', g FROM generate_series(%d, %d) g", i*10+1, i*10+10))
	}
	if !w.acked(p, 30*time.Second) {
		t.Fatalf("not acknowledged\n%s", w.log())
	}
	acked := w.confirmed()
	w.fel.HoldCompletion(true) // what follows is delivered but never acknowledged
	const after = 5
	posted := w.delivered()
	for i := 0; i < after; i++ {
		w.exec(fmt.Sprintf("INSERT INTO users SELECT g, 'unacked', g FROM generate_series(%d, %d) g", 1000+i*10, 1000+i*10+9))
	}
	// The double's request log shows the POSTs happened: unacknowledged
	// rows reached Feldera, whose completion never comes. (The batches
	// after the first wait behind its completion: what the restart sends
	// of them is their first delivery, which the count below includes.)
	w.poll("the unacknowledged rows POSTed", 30*time.Second, func() bool { return w.delivered() > posted })
	sentBeforeKill := w.delivered() - posted
	if w.confirmed() != acked {
		t.Fatalf("the slot moved while completion was held")
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	if w.confirmed() != acked { // and over the process's whole life since
		t.Fatalf("the slot moved while completion was held")
	}
	w.fel.HoldCompletion(false)
	before := w.delivered()
	p2 := w.start()
	if msg := w.caughtUp(p2, 30*time.Second); msg != "" {
		t.Fatal(msg)
	}
	killRedelivered := w.delivered() - before
	if killRedelivered != after*10 {
		t.Fatalf("SIGKILL: %d rows redelivered, want exactly the %d rows after the last ack", killRedelivered, after*10)
	}
	// Graceful stop, then restart: nothing is redelivered.
	if code := p2.stop(t); code != 0 {
		t.Fatalf("graceful stop exited %d", code)
	}
	before = w.delivered()
	p3 := w.start()
	if msg := w.caughtUp(p3, 30*time.Second); msg != "" {
		t.Fatal(msg)
	}
	// Counted once p3 is gone: nothing it could still send is missed.
	if code := p3.stop(t); code != 0 {
		t.Fatalf("graceful stop of the restart exited %d", code)
	}
	graceful := w.delivered() - before
	if graceful != 0 {
		t.Fatalf("graceful stop: %d rows redelivered, want 0", graceful)
	}
	t.Logf("redelivered after SIGKILL: %d rows (%d were unacknowledged, %d of them POSTed before the kill); after a graceful stop: %d rows", killRedelivered, after*10, sentBeforeKill, graceful)
}

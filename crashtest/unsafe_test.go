package crashtest_test

import (
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

// The unsafe modes exist to show the oracle can see a loss. These tests
// pass only when the loss IS detected (and the safe mode, same history,
// loses nothing).

// Accepted mode acks on HTTP 200. Feldera (fault tolerant, so nothing
// triggers a resnapshot) restarts before completing: what it had only
// accepted is gone, and the slot has already moved past it.
func TestUnsafe_AcceptedModeLoses(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, mode := range []string{"accepted", "completed"} {
		t.Run(mode, func(t *testing.T) {
			w := newWorld(t, func(c *felderatest.Config) { c.FaultTolerant = true })
			// At default settings: the 50 held rows are one source
			// transaction, so one Feldera transaction, whose commit
			// accepted mode takes at its HTTP 200.
			p := w.start("FELDERA_ACK_MODE="+mode, "FELDERA_COMPLETION_TIMEOUT=3s")
			seeded(w, p, false)
			w.fel.HoldCompletion(true)
			before := len(w.fel.Requests())
			w.exec("INSERT INTO users SELECT g, 'held', g FROM generate_series(1, 50) g")
			end := w.lsn("SELECT pg_current_wal_insert_lsn()::text")
			if mode == "accepted" {
				w.poll("accepted mode to ack the held batch", 30*time.Second, func() bool { return w.confirmed() >= end })
			} else {
				// Inside its Feldera transaction the batch cannot complete
				// (its commit waits for steps, which are held): sent is
				// enough.
				w.poll("the held batch sent", 30*time.Second, func() bool {
					return len(w.fel.Requests()) > before
				})
			}
			p.kill()        // the connector dies…
			w.fel.Restart() // …and Feldera restarts, dropping what it had not completed
			w.fel.HoldCompletion(false)
			p2 := w.start("FELDERA_ACK_MODE="+mode, "FELDERA_CHECKPOINT_AFTER=500ms") // at_least_once: checkpoint coverage
			msg := ""
			if mode == "accepted" {
				// The loss counts only once the restart acknowledged the
				// whole WAL: rows merely not delivered yet are no loss.
				if !w.acked(p2, 30*time.Second) {
					t.Fatalf("accepted mode: the restart did not acknowledge the WAL's end\n%s", w.log())
				}
			} else {
				msg = w.caughtUp(p2, 30*time.Second)
			}
			lost := w.lost()
			p2.stop(t)
			switch mode {
			case "accepted":
				if lost == 0 {
					t.Fatalf("accepted mode: the oracle saw no loss (%q); the harness cannot see one", msg)
				}
				t.Logf("accepted mode: %d rows lost, detected", lost)
			default:
				if msg != "" || lost != 0 {
					t.Fatalf("completed mode lost %d rows: %s", lost, msg)
				}
			}
		})
	}
}

// inconsistent copies before creating the slot: rows committed meanwhile
// are lost.
func TestUnsafe_InconsistentSnapshotLoses(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, mode := range []string{"inconsistent", "initial"} {
		t.Run(mode, func(t *testing.T) {
			w := newWorld(t, nil)
			w.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 30000) g")
			p := w.start("SNAPSHOT_MODE=" + mode)
			writeDuring(w, p, 100000)
			msg := ""
			if mode == "inconsistent" {
				if !w.acked(p, 60*time.Second) { // as above: a loss, not a delay
					t.Fatalf("inconsistent mode: the WAL's end was not acknowledged\n%s", w.log())
				}
			} else {
				msg = w.caughtUp(p, 60*time.Second)
			}
			lost := w.lost()
			p.stop(t)
			switch mode {
			case "inconsistent":
				if lost == 0 {
					t.Fatalf("inconsistent mode: no loss seen (%q); the writes did not overlap the copy?", msg)
				}
				t.Logf("inconsistent snapshot: %d rows lost, detected", lost)
			default:
				if msg != "" || lost != 0 {
					t.Fatalf("initial mode lost %d rows: %s", lost, msg)
				}
			}
		})
	}
}

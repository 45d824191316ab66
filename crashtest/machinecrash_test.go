package crashtest_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/state"
)

// A machine crash inside a Feldera transaction, Feldera living on: the
// fence file's open-transaction record written before start_transaction
// is fsynced, and the writes after it are not, so the crash may lose the
// transaction's ID. The next start then takes the API's transaction for
// the one its record names, joins it, and ends exact with no transaction
// left open. Lost whole (what the fsync prevents), the record leaves the
// transaction open with no process that knows it, and every start meets
// 409 until NO_PROGRESS_TIMEOUT ends the process.
func TestProgress_MachineCrashLosesTheTransactionID(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, c := range []struct {
		name    string
		lostAll bool // the record lost whole: the unsafe variant
	}{{"id_lost", false}, {"record_lost_UNSAFE", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, progressDouble)
			p := w.start("CRASH_AT=after_post", "CRASH_AFTER_BATCHES=2")
			w.poll("pgfeldera to stream", 60*time.Second, p.streaming)
			w.exec("INSERT INTO users SELECT g, 'big', g FROM generate_series(1, 1000) g") // ten batches, one source transaction
			if code := p.exited(60 * time.Second); code != 70 {
				t.Fatalf("the first run exited %d, want 70 at after_post\n%s", code, w.log())
			}
			if w.fel.OpenTransaction() == 0 {
				t.Fatalf("the crash left no Feldera transaction open\n%s", w.log())
			}
			path := state.FencePath(filepath.Join(w.dir, "state.json"))
			f, err := state.LoadFence(path)
			if err != nil || f.Transaction == nil || f.Transaction.ID == 0 {
				t.Fatalf("the fence file records no open transaction with its ID: %+v, %v", f, err)
			}
			if c.lostAll {
				f.Transaction = nil
			} else {
				f.Transaction.ID = 0 // as the fsynced record before start_transaction left it
			}
			if err := state.SaveFence(path, f); err != nil {
				t.Fatal(err)
			}
			if c.lostAll {
				p2 := w.start("NO_PROGRESS_TIMEOUT=10s", "FELDERA_COMPLETION_TIMEOUT=2s")
				held := fmt.Sprintf("(transaction %d,", w.fel.OpenTransaction())
				if code := p2.exited(90 * time.Second); code != 1 || !strings.Contains(p2.output(), "TransactionInProgress") || !strings.Contains(p2.output(), held) || !strings.Contains(p2.output(), "record the fence file lost") {
					t.Fatalf("without the record the restart exited %d, want 1 after meeting 409 TransactionInProgress until NO_PROGRESS_TIMEOUT, naming the transaction %s and the lost record\n%s", code, held, excerpt(p2.output(), 3000))
				}
				w.noRowInvariant = true
				return
			}
			p2 := w.start()
			target := w.lsn("SELECT pg_current_wal_insert_lsn()::text")
			w.poll("the restart to catch up", 120*time.Second, func() bool { return p2.streaming() && w.confirmed() >= target })
			p2.stop(t)
			if n := w.lost(); n != 0 {
				t.Fatalf("%d rows lost or extra\n%s", n, w.log())
			}
			if id := w.fel.OpenTransaction(); id != 0 {
				t.Fatalf("Feldera transaction %d is still open after the restart caught up\n%s", id, w.log())
			}
			if !strings.Contains(p2.output(), "joining the Feldera transaction left open") {
				t.Fatalf("the restart did not join the transaction its record names:\n%s", excerpt(p2.output(), 3000))
			}
		})
	}
}

package crashtest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// fence is FELDERA_INGRESS_FENCE in these tests. The fence runs from the
// dead process's last byte, and the test releases the held request once
// the restart says it waits: the fence must outlast the kill, the restart
// and that look on a loaded machine, so it is long (a fenced restart
// waits it out in full, whatever the machine).
const fence = 20 * time.Second

// fenceEnv is what both processes of a fence case run with: no Feldera
// transactions (see each test), and the fence.
var fenceEnv = []string{"FELDERA_INGRESS_FENCE=" + fence.String(), "FELDERA_REQUEST_TIMEOUT=5s", "FELDERA_TRANSACTIONS=off"}

// releaseInFence waits until p, started at restarted, says it holds its
// ingress back behind the dead process's fence, checks it sent nothing
// yet, and releases the held request: it lands inside the fence.
func (w *world) releaseInFence(p *proc, restarted time.Time) {
	w.t.Helper()
	w.poll("the restart to wait out the fence", time.Minute, func() bool { return p.waitedFence() || exitedNow(p) })
	if exitedNow(p) {
		w.t.Fatalf("the restart exited %d before it fenced\n%s", p.code, w.log())
	}
	if first := w.firstPostAfter(restarted); first >= 0 {
		w.t.Fatalf("the restart had sent a request (%s after it started) before the test could release the late one: the fence (%s) did not hold it back\n%s", first, fence, w.log())
	}
	w.fel.ClearFaults()
}

// postsBeforeLate counts the requests made since t (a late one aside) that
// the double's log holds before the first late request: what a restart
// sent before the dead process's request landed.
func (w *world) postsBeforeLate(t time.Time) int {
	n := 0
	for _, r := range w.fel.Requests() {
		if r.Late {
			return n
		}
		if !r.Time.Before(t) {
			n++
		}
	}
	w.t.Fatalf("no late request in the double's log\n%s", w.log())
	return -1
}

// SIGKILL while Feldera holds an ingress request that it applies later:
// the restarted process finds the fence file still marked running and sends
// nothing until FELDERA_INGRESS_FENCE has passed, so the late request lands
// first and the replay then brings Feldera up to date. With the fence file
// removed before the restart (no memory of the dead process), the new
// process sends the newer rows at once, the late request overwrites them,
// and the oracle sees it.
func TestKill_LateIngressAfterRestartIsFenced(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("fence_file_kept=%v", keep), func(t *testing.T) {
			w := newWorld(t, nil)
			// Without Feldera transactions: the ten rows are one source
			// transaction, which would go inside a Feldera transaction
			// the dead process never commits; with the fence file gone
			// (the unsafe variant) nothing would remember it, and every
			// start_transaction would be answered 409. The fence matters
			// the same either way.
			p := w.start(fenceEnv...)
			seeded(w, p, false)
			w.fel.InjectFault(felderatest.Fault{Kind: felderatest.HangThenApply, Path: "ingress", Count: 1})
			w.exec("INSERT INTO users SELECT g, 'old', g FROM generate_series(1, 10) g")
			w.waitHeld(1, 30*time.Second) // posted, and held by the double
			p.kill()
			if !keep {
				os.Remove(filepath.Join(w.dir, "state.json.fence"))
			}
			w.exec("UPDATE users SET name = 'new' WHERE id <= 10")
			restarted := time.Now()
			p2 := w.start(fenceEnv...)
			if !keep {
				// Nothing holds the new process back: once it has sent
				// everything, the dead process's request lands on top.
				if !w.acked(p2, 30*time.Second) {
					t.Fatalf("not caught up\n%s", w.log())
				}
				w.fel.ClearFaults()
				w.waitLateApplied(1, 30*time.Second)
				// Queued late, it shows once the step that takes it ends.
				w.until(30*time.Second, 10*time.Millisecond, func() bool { return w.oracle() != "" })
				if report := w.oracle(); report == "" {
					t.Fatal("without the fence file the late request should overwrite newer rows; the oracle saw nothing")
				}
				t.Log("fence file removed: stale rows detected")
				p2.stop(t)
				return
			}
			// Release the dead process's request once the restart says it
			// waits: it lands now, inside the fence.
			w.releaseInFence(p2, restarted)
			w.waitLateApplied(1, 30*time.Second)
			if msg := w.caughtUp(p2, 30*time.Second); msg != "" {
				t.Fatal(msg)
			}
			if n := w.postsBeforeLate(restarted); n != 0 {
				t.Fatalf("the restart sent %d requests before the dead process's late one landed (fence %s)\n%s", n, fence, w.log())
			}
			if !strings.Contains(w.log(), "did not stop cleanly") {
				t.Fatalf("the restart did not say why it waited\n%s", w.log())
			}
			p2.stop(t)
		})
	}
}

// A restart that replays a TRUNCATE reads Feldera's rows to retract them.
// If a request of the dead process can still land, that read must wait
// for the fence too: otherwise it sees the table empty, the TRUNCATE is
// acknowledged, and the late request resurrects truncated rows. Here the
// dead process flushed the first part of a transaction that ends in a
// TRUNCATE (BATCH_MAX_ROWS=5); the restart (a larger batch) discards those
// rows with the TRUNCATE, so its first call to Feldera is the read. With
// the fence file kept, the late request lands during the fence and is
// retracted: Feldera ends empty. Without it, the oracle sees the rows.
func TestKill_TruncateReplayWaitsForLateIngress(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("fence_file_kept=%v", keep), func(t *testing.T) {
			w := newWorld(t, nil)
			// Without Feldera transactions: with one, the dead process's
			// first part goes out inside a transaction it never commits,
			// and the late rows stay invisible in it (the unsafe variant
			// would show nothing until someone commits it). The fence
			// matters the same either way.
			p := w.start(append(fenceEnv[:len(fenceEnv):len(fenceEnv)], "BATCH_MAX_ROWS=5")...)
			seeded(w, p, false)
			w.fel.InjectFault(felderatest.Fault{Kind: felderatest.HangThenApply, Path: "ingress", Count: 1})
			w.exec("BEGIN; INSERT INTO users SELECT g, 'doomed', g FROM generate_series(1, 10) g; TRUNCATE users; COMMIT")
			w.waitHeld(1, 30*time.Second)
			p.kill()
			if !keep {
				os.Remove(filepath.Join(w.dir, "state.json.fence"))
			}
			restarted := time.Now()
			p2 := w.start(append(fenceEnv[:len(fenceEnv):len(fenceEnv)], "BATCH_MAX_ROWS=100")...)
			if !keep {
				if !w.acked(p2, 30*time.Second) {
					t.Fatalf("not caught up\n%s", w.log())
				}
				w.fel.ClearFaults() // the dead process's rows land after the retraction
				w.waitLateApplied(1, 30*time.Second)
				// They show once their step ends.
				w.until(30*time.Second, 10*time.Millisecond, func() bool { return len(w.fel.Rows("users")) != 0 })
				if n := len(w.fel.Rows("users")); n == 0 {
					t.Fatal("without the fence file the late request should resurrect truncated rows; Feldera is empty")
				}
				t.Log("fence file removed: truncated rows resurrected")
				p2.stop(t)
				return
			}
			// Inside the fence: the late rows land before the retraction
			// reads.
			w.releaseInFence(p2, restarted)
			w.waitLateApplied(1, 30*time.Second)
			if msg := w.caughtUp(p2, 30*time.Second); msg != "" {
				t.Fatal(msg)
			}
			if n := len(w.fel.Rows("users")); n != 0 {
				t.Fatalf("Feldera holds %d truncated rows\n%s", n, w.log())
			}
			if !strings.Contains(w.log(), "retracting every row") {
				t.Fatalf("the TRUNCATE was not replayed\n%s", w.log())
			}
			p2.stop(t)
		})
	}
}

package crashtest_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// A fatal error in the middle of a source transaction larger than a
// batch, at default settings with the progress table declared: Feldera
// refuses a POST of it with parse errors, which retrying cannot fix. The
// process exits 1, and the Feldera transaction that holds the part sent
// is committed on the way out, never left open (it would hold every
// other writer's input and every checkpoint), and said loudly: the log
// names the transaction, the fence file keeps the record, `pgfeldera
// status` shows it. The next start, the refusal gone, ends exact.
func TestExit_FatalInsideATransactionCommitsLoudly(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	w := newWorld(t, progressDouble)
	p := w.start()
	w.poll("pgfeldera to stream", 60*time.Second, p.streaming)
	before := len(w.fel.Requests())
	w.exec("INSERT INTO users SELECT g, 'big', g FROM generate_series(1, 50000) g") // 500 batches, one source transaction
	w.poll("the big transaction's first POSTs", 60*time.Second, func() bool { return len(w.fel.Requests()) >= before+3 })
	w.fel.InjectFault(felderatest.Fault{Kind: felderatest.FailStatus, Path: "ingress", Status: 400, Code: "ParseErrors", Count: 1})
	if code := p.exited(60 * time.Second); code != 1 {
		t.Fatalf("the run exited %d, want 1 (fatal: parse errors)\n%s", code, w.log())
	}
	out := p.output()
	if id := w.fel.OpenTransaction(); id != 0 {
		t.Fatalf("Feldera transaction %d is left open after the process exited\n%s", id, excerpt(out, 4000))
	}
	if !strings.Contains(out, "committing a Feldera transaction that holds part of a source transaction") || !strings.Contains(out, "the process exits inside a source transaction") {
		t.Fatalf("the exit did not say that it committed part of a source transaction:\n%s", excerpt(out, 4000))
	}
	st := exec.Command(binary, "status")
	st.Env = w.env()
	so, _ := st.CombinedOutput()
	if !strings.Contains(string(so), "partial commit") || !strings.Contains(string(so), "the process exits inside a source transaction") {
		t.Fatalf("status does not show the partial commit:\n%s", so)
	}

	w.fel.ClearFaults()
	p2 := w.start()
	target := w.lsn("SELECT pg_current_wal_insert_lsn()::text")
	w.poll("the restart to catch up", 120*time.Second, func() bool { return p2.streaming() && w.confirmed() >= target })
	p2.stop(t)
	if n := w.lost(); n != 0 {
		t.Fatalf("%d rows lost or extra after the restart\n%s", n, w.log())
	}
}

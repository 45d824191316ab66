package crashtest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

// A crash right after pgfeldera started a Feldera transaction, while an
// automatic step of another client's input runs (Feldera runs every
// ordinary step as a transaction of its own): the transaction the dead
// process left is pending behind that step, named by the initiators and
// not by transaction_id, and the API's initiator stays taken. The restart
// must settle it (commit it; pending, that drops it) before it starts its
// own, or every start_transaction is answered 409 until the session gives
// up, and again in the next one.
func TestCrash_AfterBeginBesideAutomaticSteps(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	w := newWorld(t, func(c *felderatest.Config) {
		c.Tables = felderatest.MustParseDDL(felderaDDL + `
CREATE TABLE side (id BIGINT NOT NULL PRIMARY KEY, v VARCHAR);`)
		c.StepTime, c.StepJitter = 20*time.Millisecond, 30*time.Millisecond
		// 60,000 side records: an 18 s step, long enough that the crash
		// lands inside it on a loaded machine too (6 s did not, once).
		c.StepPerRecord, c.StepRecords = 300*time.Microsecond, 100_000
	})
	side, err := feldera.New(feldera.Config{URL: w.fel.URL, Pipeline: "p"})
	if err != nil {
		t.Fatal(err)
	}
	p := w.start("CRASH_AT=after_begin", "BATCH_LINGER_MS=5")
	w.poll("pgfeldera to stream", 60*time.Second, p.streaming)
	var body strings.Builder
	for i := 0; i < 60_000; i++ {
		fmt.Fprintf(&body, `{"insert":{"id":%d,"v":"x"}}`+"\n", i)
	}
	if _, err := side.Ingress(context.Background(), "side", []byte(body.String())); err != nil {
		t.Fatal(err)
	}
	w.poll("a long automatic step", 10*time.Second, func() bool {
		st, err := side.Stats(context.Background())
		return err == nil && st.GlobalMetrics.TransactionStatus == "CommitInProgress" && st.GlobalMetrics.TransactionID > 0 &&
			st.GlobalMetrics.TotalProcessedRecords < 60_000 && st.IngressBuffered(map[string]bool{"side": true}) == 0
	})
	w.exec("BEGIN; INSERT INTO users VALUES (1, 'a', 1); INSERT INTO items VALUES (1, 'eu', 1); COMMIT")
	if code := p.exited(30 * time.Second); code != 70 {
		t.Fatalf("exit %d, want 70 at after_begin\n%s", code, w.log())
	}
	st, err := side.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if in := st.GlobalMetrics.TransactionInitiators; st.GlobalMetrics.TransactionStatus != "CommitInProgress" || in == nil || in.InitiatedByAPI == nil {
		t.Fatalf("the crash did not leave a transaction pending behind the automatic step: /stats %+v", st.GlobalMetrics)
	}
	conflicts := w.fel.TransactionConflicts()
	q := w.start("BATCH_LINGER_MS=5")
	for i := 2; i <= 20; i++ {
		w.exec(fmt.Sprintf("BEGIN; INSERT INTO users VALUES (%d, 'a', %d); INSERT INTO items VALUES (%d, 'eu', %d); COMMIT", i, i, i, i))
	}
	if report := w.caughtUp(q, 120*time.Second); report != "" {
		t.Fatalf("not exact after the restart: %s\n%s", report, w.log())
	}
	out := q.output()
	if !strings.Contains(out, "joining the Feldera transaction left open") { // every table keyed: joined
		t.Fatalf("the restart did not settle the transaction left open\n%s", excerpt(out, 4000))
	}
	if n := w.fel.TransactionConflicts() - conflicts; n > 2 {
		t.Fatalf("%d start_transaction requests answered 409 after the restart: the transaction left open never settled\n%s", n, excerpt(out, 4000))
	}
	if id := w.fel.OpenTransaction(); id != 0 {
		t.Fatalf("Feldera transaction %d left open after catching up", id)
	}
}

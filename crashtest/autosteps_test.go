package crashtest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

// A crash right after pgfeldera started a Feldera transaction, while
// another client feeds a side table so that Feldera's own automatic steps
// run nearly all the time: the transaction the dead process left is
// pending behind them (named by the initiators, not by transaction_id).
// The restart commits it, sends nothing beside it, and catches up; a
// start_transaction answered 409 over and over (the transaction never
// settled) fails the test.
func TestCrash_AfterBeginBesideAutomaticSteps(t *testing.T) {
	w := newWorld(t, func(c *felderatest.Config) {
		c.Tables = felderatest.MustParseDDL(felderaDDL + `
CREATE TABLE side (id BIGINT NOT NULL PRIMARY KEY, v VARCHAR);`)
		c.StepTime, c.StepJitter = 20*time.Millisecond, 30*time.Millisecond
	})
	stopSide := feedSideTable(t, w)
	defer stopSide()
	p := w.start("CRASH_AT=after_begin", "BATCH_LINGER_MS=5")
	w.poll("pgfeldera to stream", 60*time.Second, p.streaming)
	w.exec("BEGIN; INSERT INTO users VALUES (1, 'a', 1); INSERT INTO items VALUES (1, 'eu', 1); COMMIT")
	if code := p.exited(30 * time.Second); code != 70 {
		t.Fatalf("exit %d, want 70 at after_begin\n%s", code, w.log())
	}
	open := w.fel.OpenTransaction()
	if open == 0 {
		t.Fatalf("no Feldera transaction left open by the crash\n%s", w.log())
	}
	conflicts := w.fel.TransactionConflicts()
	q := w.start("BATCH_LINGER_MS=5")
	for i := 2; i <= 20; i++ {
		w.exec(fmt.Sprintf("BEGIN; INSERT INTO users VALUES (%d, 'a', %d); INSERT INTO items VALUES (%d, 'eu', %d); COMMIT", i, i, i, i))
	}
	if report := w.caughtUp(q, 60*time.Second); report != "" {
		t.Fatalf("not exact after the restart: %s\n%s", report, w.log())
	}
	out := q.output()
	if !strings.Contains(out, "committing the Feldera transaction left open") {
		t.Fatalf("the restart did not commit the transaction left open (%d)\n%s", open, excerpt(out, 4000))
	}
	if n := w.fel.TransactionConflicts() - conflicts; n > 2 {
		t.Fatalf("%d start_transaction requests answered 409 after the restart: the transaction left open never settled\n%s", n, excerpt(out, 4000))
	}
	if strings.Contains(out, "no longer open") || strings.Contains(out, "another client committed it") {
		t.Fatalf("the restart took an automatic step for another client's commit\n%s", excerpt(out, 4000))
	}
	if id := w.fel.OpenTransaction(); id != 0 {
		t.Fatalf("Feldera transaction %d left open after catching up", id)
	}
}

// feedSideTable posts a row to the side table every 2 ms through a client
// of its own until the returned function is called.
func feedSideTable(t *testing.T, w *world) func() {
	c, err := feldera.New(feldera.Config{URL: w.fel.URL, Pipeline: "p"})
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			if _, err := c.Ingress(context.Background(), "side", []byte(fmt.Sprintf(`{"insert":{"id":%d,"v":"x"}}`, i%100))); err != nil {
				t.Errorf("side input: %v", err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { stop.Store(true); wg.Wait() }) }
}

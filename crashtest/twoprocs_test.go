package crashtest_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

// Two pgfeldera processes feed one pipeline, each with its own slot,
// publication, tables and state file, and both wrap their two-table
// transactions in Feldera transactions (FELDERA_TRANSACTIONS=auto). Only
// one client holds the pipeline's transaction at a time: the double
// answers the other 409, and it backs off and retries. Both catch up, and
// every table equals its source.
func TestTwoProcesses_ContendForTransactions(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	w := newWorld(t, func(c *felderatest.Config) {
		c.Tables = felderatest.MustParseDDL(felderaDDL + `
CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, total INT);
CREATE TABLE lines (order_id BIGINT NOT NULL, n INT NOT NULL, qty INT, PRIMARY KEY (order_id, n));`)
	})
	w.fel.SetCompletionDelay(10 * time.Millisecond) // a transaction lasts a step or two
	w.exec(`CREATE TABLE orders (id bigint PRIMARY KEY, total int);
		CREATE TABLE lines (order_id bigint, n int, qty int, PRIMARY KEY (order_id, n));
		CREATE PUBLICATION pub2 FOR TABLE orders, lines;`)
	slotB := w.slot + "_b"
	a := w.start("BATCH_LINGER_MS=5")
	b := w.start("BATCH_LINGER_MS=5", "PG_PUBLICATION=pub2", "PG_SLOT="+slotB, "TABLES=orders,lines",
		"STATE_FILE="+filepath.Join(w.dir, "state_b.json"))
	w.poll("both processes to stream", 60*time.Second, func() bool { return a.streaming() && b.streaming() || exitedNow(a) || exitedNow(b) })
	if exitedNow(a) || exitedNow(b) {
		t.Fatalf("a process exited before it streamed\n%s", w.log())
	}
	var wg sync.WaitGroup
	for _, load := range []func(i int) string{
		func(i int) string {
			return fmt.Sprintf("BEGIN; INSERT INTO users VALUES (%d, 'u', %d); INSERT INTO items VALUES (%d, 'eu', %d); COMMIT", i, i, i, i)
		},
		func(i int) string {
			return fmt.Sprintf("BEGIN; INSERT INTO orders VALUES (%d, %d); INSERT INTO lines VALUES (%d, 1, 1), (%d, 2, 2); COMMIT", i, i, i, i)
		},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(context.Background(), w.dsn)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close(context.Background())
			for i := 1; i <= 80; i++ {
				if _, err := conn.Exec(context.Background(), load(i)); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(3 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	// Caught up: both slots confirmed the WAL's end, waited for as long as
	// the processes or the double move (world.until; its progress mark
	// follows the first slot, the request log both processes).
	target := w.lsn("SELECT pg_current_wal_insert_lsn()::text")
	caught := w.until(60*time.Second, 20*time.Millisecond, func() bool {
		var n int
		if err := w.db.QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ($1, $2) AND confirmed_flush_lsn >= $3::pg_lsn",
			w.slot, slotB, target.String()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 2 || exitedNow(a) || exitedNow(b)
	})
	if !caught || exitedNow(a) || exitedNow(b) {
		t.Fatalf("both processes did not catch up (nothing moved for 60 s, or one exited)\n%s", w.log())
	}
	// The last completions land a moment after the acknowledgement:
	// waited for, not slept on.
	w.compared = [][2]string{{"users", "users"}, {"items", "catalog_items"}, {"orders", "orders"}, {"lines", "lines"}}
	report := "not compared"
	w.until(60*time.Second, 20*time.Millisecond, func() bool { report = w.oracle(); return report == "" })
	if report != "" {
		t.Fatal(report)
	}
	conflicts, committed := w.fel.TransactionConflicts(), w.fel.TransactionsCommitted()
	t.Logf("Feldera transactions committed: %d; 409 TransactionInProgress answered: %d", committed, conflicts)
	if conflicts == 0 {
		t.Fatal("no start_transaction met a 409: the two processes never contended, the test shows nothing")
	}
	if id := w.fel.OpenTransaction(); id != 0 {
		t.Fatalf("Feldera transaction %d left open", id)
	}
	for _, p := range []*proc{a, b} {
		if code := p.stop(t); code != 0 {
			t.Fatalf("a process exited %d on SIGTERM\n%s", code, w.log())
		}
	}
}

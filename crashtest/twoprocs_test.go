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
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/oracle"
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
	deadline := time.Now().Add(60 * time.Second)
	for !(a.streaming() && b.streaming()) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
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
	target := w.lsn("SELECT pg_current_wal_insert_lsn()::text")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := w.db.QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ($1, $2) AND confirmed_flush_lsn >= $3::pg_lsn",
			w.slot, slotB, target.String()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 2 {
			break
		}
		if time.Now().After(deadline) || exitedNow(a) || exitedNow(b) {
			t.Fatalf("both processes did not catch up within 60 s\n%s", w.log())
		}
	}
	time.Sleep(50 * time.Millisecond) // the last completions land
	for _, pair := range [][2]string{{"users", "users"}, {"items", "catalog_items"}, {"orders", "orders"}, {"lines", "lines"}} {
		r, err := oracle.Compare(context.Background(), w.db, pair[0], w.fel, pair[1])
		if err != nil {
			t.Fatal(err)
		}
		if !r.Equal() {
			t.Fatalf("%s: %s", pair[0], r.String())
		}
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

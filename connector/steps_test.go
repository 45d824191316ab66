package connector_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/oracle"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// Against Feldera as it steps (feldera/felderatest, circuit.go): steps of
// 20–50 ms, every ordinary step an automatic transaction, request bodies
// fed 32 KiB at a time, and a small per-endpoint cap per step, so one
// request lands over several steps.
func heavySteps(fc *felderatest.Config) {
	fc.StepTime, fc.StepJitter, fc.StepRecords = 20*time.Millisecond, 30*time.Millisecond, 1000
}

// sessionsOnly fails when the connector needed more than one session:
// a session that failed is a transaction it could not finish.
func sessionsOnly(t *testing.T, e *env, c *connector.Connector) {
	t.Helper()
	if n := c.Stats().Sessions.Load(); n != 1 {
		t.Fatalf("%d sessions, want 1 (a session failed)\n%s", n, tail(e.logs.String(), 4000))
	}
}

const transfersPG = `
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, filler text NOT NULL);
INSERT INTO accounts SELECT g, 1000, repeat('x', 200) FROM generate_series(1, 1000) g;
CREATE PUBLICATION pub FOR TABLE accounts;`

const transfersFeldera = `CREATE TABLE accounts (id INT NOT NULL PRIMARY KEY, balance BIGINT NOT NULL, filler VARCHAR NOT NULL);`

const transferScript = `\set a random(1, 1000)
\set b random(1, 1000)
\set d random(1, 100)
BEGIN;
UPDATE accounts SET balance = balance - :d WHERE id = :a;
UPDATE accounts SET balance = balance + :d WHERE id = :b;
END;
`

// One-table transfers: each source transaction moves an amount between two
// accounts of one table, so every state Postgres had sums to 1,000,000.
// Requests near 1 MB land over several steps; a view can see a prefix of
// one, and a prefix can hold the debit without the credit. With auto, a
// flush that holds a multi-record transaction goes inside a Feldera
// transaction and no state breaks the sum; with off (which is what auto
// did for a single-table flush of whole transactions), states do.
func TestStream_TransfersAtomicInOneTable(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	pgbench := pgcluster.Tool(t, "pgbench")
	script := filepath.Join(t.TempDir(), "transfer.sql")
	if err := os.WriteFile(script, []byte(transferScript), 0o644); err != nil {
		t.Fatal(err)
	}
	const noFeedWait = "auto_without_feed_wait_BROKEN"
	for _, mode := range []string{connector.TxnAuto, connector.TxnOff, noFeedWait} {
		t.Run(mode, func(t *testing.T) {
			iv := &invariant{check: func(v felderatest.View) (bool, string) {
				n := v.Len("accounts")
				sum, err := v.SumInt("accounts", "balance")
				if err != nil {
					return false, err.Error()
				}
				// Fewer than 1,000 accounts: the snapshot, landing batch
				// by batch, before any transfer streams.
				return n < 1000 || sum == 1_000_000, fmt.Sprintf("%d accounts, sum(balance)=%d", n, sum)
			}}
			e := newEnvOn(t, pgcluster.Shared(t), transfersPG, transfersFeldera, func(fc *felderatest.Config) {
				heavySteps(fc)
				// A step takes a tenth of what a request carries, and takes
				// 100-130 ms: a commit asked as soon as the last POST was
				// answered finds most of it still buffered for a second,
				// however slow the machine makes the connector (with 20-50
				// ms steps a parallel -race run fed it all first).
				fc.StepRecords = 200
				fc.StepTime = 100 * time.Millisecond
				fc.OnState = iv.see
			})
			cfg := e.config("accounts")
			cfg.SnapshotMode = connector.SnapshotInitial
			cfg.Transactions = mode
			if mode == noFeedWait {
				cfg.Transactions = connector.TxnAuto
			}
			cfg.BatchMaxBytes = 1 << 20
			cfg.BatchLinger = 5 * time.Second // batches seal at the byte bound: requests near 1 MB
			c := e.newConnector(cfg, e.client)
			if mode == noFeedWait {
				connector.SkipFeedWait(c)
			}
			e.run(c)
			e.waitSlot()
			e.poll("the snapshot", 60*time.Second, func() bool { return e.fel.Len("accounts") == 1000 })
			// A fixed count, not a time: a loaded machine runs them slower,
			// not fewer (about 6 MB of changes).
			runTool(t, pgbench, "-n", "-f", script, "-t", "1500", "-c", "4", "-j", "2", e.dsn)
			e.waitConfirmed(e.currentLSN(), 120*time.Second)
			e.assertEqual("accounts", "accounts")
			states, bad, first := iv.counts()
			maxReq := 0
			for _, r := range e.fel.Requests() {
				maxReq = max(maxReq, r.Bytes)
			}
			t.Logf("FELDERA_TRANSACTIONS=%s: %d states, %d broke the sum (first: %s); largest request %d bytes; Feldera transactions %d",
				mode, states, bad, first, maxReq, c.Stats().Transactions.Load())
			if maxReq < 512<<10 {
				t.Fatalf("largest request %d bytes: the workload did not make requests near 1 MB", maxReq)
			}
			switch mode {
			case connector.TxnAuto:
				if bad != 0 {
					t.Fatalf("%d of %d states broke the sum (first: %s)", bad, states, first)
				}
				sessionsOnly(t, e, c)
			case connector.TxnOff:
				if bad == 0 {
					t.Fatalf("none of %d states broke the sum: the check cannot see a transaction seen in part", states)
				}
			case noFeedWait:
				// A commit asked while records of the transaction are still
				// buffered: they land after it, outside, over several steps.
				if bad == 0 {
					t.Fatalf("committing without the feed wait broke none of %d states: the test cannot see what the wait prevents", states)
				}
			}
		})
	}
}

// pgbench's tpcb-like transactions while another client feeds a side
// table of the same pipeline (as any other input connector would): steps
// run nearly all the time, each its own automatic transaction, and
// pgfeldera's transactions start behind them, pending. None of that is
// "another client committed ours": one session, no broken state.
func TestStream_TransactionsBesideAnotherInput(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	pgbench := pgcluster.Tool(t, "pgbench")
	iv := &invariant{check: oracle.PgbenchSums}
	e := newEnvOn(t, pgcluster.Shared(t), "SELECT 1", oracle.PgbenchDDL+`
CREATE TABLE side (id BIGINT NOT NULL PRIMARY KEY, v VARCHAR);`, func(fc *felderatest.Config) {
		heavySteps(fc)
		fc.OnState = iv.see
	})
	runTool(t, pgbench, "-i", "-s", "1", "-q", e.dsn)
	e.exec("CREATE PUBLICATION pub FOR TABLE pgbench_accounts, pgbench_tellers, pgbench_branches")
	cfg := e.config("pgbench_accounts,pgbench_tellers,pgbench_branches")
	cfg.SnapshotMode = connector.SnapshotInitial
	c := e.newConnector(cfg, e.client)
	e.run(c)
	e.waitSlot()
	e.poll("the snapshot", 60*time.Second, func() bool { return e.fel.Len("pgbench_accounts") == 100_000 })
	fed := feedSide(t, e, 2*time.Millisecond)
	runTool(t, pgbench, "-n", "-T", "3", "-R", "200", "-c", "2", "-j", "1", e.dsn)
	e.waitConfirmed(e.currentLSN(), 90*time.Second)
	n := fed()
	for _, tb := range []string{"pgbench_accounts", "pgbench_tellers", "pgbench_branches"} {
		e.assertEqual(tb, tb)
	}
	states, bad, first := iv.counts()
	t.Logf("%d side requests; %d states, %d broke the invariant (first: %s); Feldera transactions %d, committed %d",
		n, states, bad, first, c.Stats().Transactions.Load(), e.fel.TransactionsCommitted())
	if bad != 0 {
		t.Fatalf("%d of %d states broke the invariant (first: %s)", bad, states, first)
	}
	sessionsOnly(t, e, c)
	if id := e.fel.OpenTransaction(); id != 0 {
		t.Fatalf("Feldera transaction %d left open", id)
	}
}

// feedSide posts a row to the side table every interval, through a client
// of its own, until the returned function is called (it returns how many
// requests went). Its failures are the test's.
func feedSide(t *testing.T, e *env, every time.Duration) func() int {
	c, err := feldera.New(feldera.Config{URL: e.fel.URL, Pipeline: "p"})
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var n atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			if _, err := c.Ingress(context.Background(), "side", []byte(fmt.Sprintf(`{"insert":{"id":%d,"v":"x"}}`, i%100))); err != nil {
				t.Errorf("side input: %v", err)
				return
			}
			n.Add(1)
			time.Sleep(every)
		}
	}()
	done := func() int {
		stop.Store(true)
		wg.Wait()
		return int(n.Load())
	}
	t.Cleanup(func() { done() })
	return done
}

// A quoted, mixed-case table: its ingress endpoint is "Orders".api-ingress-…
// (named as sent). Each transaction inserts a customer and 5,000 of its
// orders; the orders land over many steps. pgfeldera must see them
// buffered under that name before it commits, or some land after the
// commit, outside it: a state with the customer and part of its orders.
func TestStream_QuotedTableInTransactions(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	iv := &invariant{check: func(v felderatest.View) (bool, string) {
		per := map[string]int{}
		for _, r := range v.Rows(`"Orders"`) {
			per[string(r["cust"])]++
		}
		for _, r := range v.Rows("customers") {
			if n := per[string(r["id"])]; n != 5000 {
				return false, fmt.Sprintf("customer %s visible with %d of its 5000 orders", r["id"], n)
			}
		}
		return true, ""
	}}
	e := newEnvOn(t, pgcluster.Shared(t), `
CREATE TABLE customers (id int PRIMARY KEY);
CREATE TABLE "Orders" (id int PRIMARY KEY, cust int NOT NULL);
CREATE PUBLICATION pub FOR TABLE customers, "Orders";`, `
CREATE TABLE customers (id INT NOT NULL PRIMARY KEY);
CREATE TABLE "Orders" (id INT NOT NULL PRIMARY KEY, cust INT NOT NULL);`, func(fc *felderatest.Config) {
		heavySteps(fc)
		fc.OnState = iv.see
	})
	cfg := e.config(`customers,"Orders"`)
	c := e.newConnector(cfg, e.client)
	e.run(c)
	e.waitSlot()
	for i := 0; i < 4; i++ {
		e.exec(fmt.Sprintf(`BEGIN; INSERT INTO customers VALUES (%d);
			INSERT INTO "Orders" SELECT g, %d FROM generate_series(%d, %d) g; COMMIT`, i, i, i*5000+1, (i+1)*5000))
	}
	e.waitConfirmed(e.currentLSN(), 60*time.Second)
	e.assertEqual("customers", "customers")
	e.assertEqual(`"Orders"`, `"Orders"`)
	states, bad, first := iv.counts()
	t.Logf("%d states, %d broke the invariant (first: %s)", states, bad, first)
	if bad != 0 {
		t.Fatalf("%d of %d states showed a customer without all its orders (first: %s)", bad, states, first)
	}
	sessionsOnly(t, e, c)
}

// TRUNCATE of 50,000 rows while Feldera completes a request 35 s after it
// arrives, longer than FELDERA_REQUEST_TIMEOUT: the keys are read whole
// first, then deleted; no batch waits inside the query's answer (whose
// idle timer would end it).
func TestStream_TruncateWithSlowCompletion(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel() // waits 35 s for one completion
	e := newEnvOn(t, pgcluster.Shared(t), `
CREATE TABLE users (id int PRIMARY KEY, name text, score int);
INSERT INTO users SELECT g, 'u', g FROM generate_series(1, 50000) g;
CREATE PUBLICATION pub FOR TABLE users;`, `CREATE TABLE users (id INT NOT NULL PRIMARY KEY, name VARCHAR, score INT);`, nil)
	cfg := e.snapshotConfig("users")
	cfg.BatchMaxRows = 50_000 // the retraction is one batch: one 35 s wait
	cfg.CompletionTimeout = 0 // the default, 60 s
	c := e.newConnector(cfg, e.client)
	e.run(c)
	e.waitSlot()
	e.poll("the snapshot", 60*time.Second, func() bool { return e.fel.Len("users") == 50_000 })
	e.waitConfirmed(e.currentLSN(), 60*time.Second)
	e.fel.SetCompletionDelay(35 * time.Second)
	e.exec("TRUNCATE users")
	e.waitConfirmed(e.currentLSN(), 3*time.Minute)
	e.assertEqual("users", "users")
	if n := e.fel.Len("users"); n != 0 {
		t.Fatalf("%d rows after the TRUNCATE", n)
	}
	sessionsOnly(t, e, c)
}

// A 200,000-row source transaction whose Feldera commit takes 90 s, longer
// than FELDERA_COMPLETION_TIMEOUT: pgfeldera waits for it as long as the
// commit progresses, and delivers every row once, in one session.
func TestStream_LongCommit(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel() // a 20 s commit
	e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) {
		fc.CommitPerRecord = 100 * time.Microsecond // 200,000 records: 20 s
	})
	cfg := e.config("users")
	cfg.CompletionTimeout = 10 * time.Second // the commit takes twice as long
	c := e.newConnector(cfg, e.client)
	e.run(c)
	e.waitSlot()
	start := time.Now()
	e.exec("INSERT INTO users SELECT g, 'u', g FROM generate_series(1, 200000) g")
	e.waitConfirmed(e.currentLSN(), 5*time.Minute)
	took := time.Since(start)
	e.assertEqual("users", "users")
	onceEach(t, e, "users", 200_000)
	sessionsOnly(t, e, c)
	if took <= 2*cfg.CompletionTimeout {
		t.Fatalf("acknowledged after %s: the commit did not outlast FELDERA_COMPLETION_TIMEOUT (%s) twice, the test shows nothing", took, cfg.CompletionTimeout)
	}
	t.Logf("acknowledged after %s", took.Round(time.Second))
}

// onceEach fails unless each of want keys was inserted exactly once.
func onceEach(t *testing.T, e *env, table string, want int) {
	t.Helper()
	by := e.fel.InsertsByKey(table)
	if len(by) != want {
		t.Fatalf("%d keys of %s inserted, want %d", len(by), table, want)
	}
	for k, n := range by {
		if n != 1 {
			t.Fatalf("key %s of %s inserted %d times, want once", k, table, n)
		}
	}
}

// SNAPSHOT_TRANSACTION loads the first snapshot as one Feldera transaction;
// its commit takes 120 s. The copy is sent once: no timeout ends the
// session and starts a second copy beside the running commit.
func TestSnapshot_OneTransactionLongCommit(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel() // a 25 s commit
	e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) {
		fc.CommitPerRecord = 250 * time.Microsecond // 100,000 records: 25 s
	})
	e.exec("INSERT INTO users SELECT g, 'u', g FROM generate_series(1, 100000) g")
	cfg := e.snapshotConfig("users")
	cfg.SnapshotTransaction = true
	cfg.CompletionTimeout = 10 * time.Second // the commit takes 2.5 times as long
	c := e.newConnector(cfg, e.client)
	start := time.Now()
	e.run(c)
	e.waitLog("snapshot: complete", 5*time.Minute)
	e.waitConfirmed(e.currentLSN(), time.Minute)
	e.assertEqual("users", "users")
	onceEach(t, e, "users", 100_000)
	sessionsOnly(t, e, c)
	if !strings.Contains(e.logs.String(), "inside one Feldera transaction") {
		t.Fatal("the snapshot did not go inside a Feldera transaction")
	}
	if took := time.Since(start); took <= 2*cfg.CompletionTimeout {
		t.Fatalf("done after %s: the commit did not outlast FELDERA_COMPLETION_TIMEOUT (%s) twice, the test shows nothing", took, cfg.CompletionTimeout)
	}
}

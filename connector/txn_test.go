package connector_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/oracle"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// invariant counts the states Feldera exposes and those that break a
// predicate over them.
type invariant struct {
	mu            sync.Mutex
	states, bad   int
	first         string
	check         func(v felderatest.View) (bool, string)
	armed         bool
	statesAtStart int
}

func (iv *invariant) see(v felderatest.View) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	iv.states++
	ok, why := iv.check(v)
	if !ok {
		iv.bad++
		if iv.first == "" {
			iv.first = why
		}
	}
}

func (iv *invariant) counts() (states, bad int, first string) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	return iv.states, iv.bad, iv.first
}

// pgbench's tpcb-like transaction adds one delta to an account, a teller
// and a branch: in every state Postgres ever had, the three sums are
// equal. The double checks it at every state Feldera would expose (after
// each step outside a transaction, after each commit), stepping as Feldera
// does: 20–50 ms steps, each an automatic transaction, bodies fed in
// chunks, a small cap per step. With FELDERA_TRANSACTIONS=auto no state
// breaks it and no session fails; with off, the three tables' requests
// land at different steps, and states do: the check sees half-applied
// transactions.
func TestStream_TransactionsAtomicUnderPgbench(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	pgbench := pgcluster.Tool(t, "pgbench")
	// "auto/slow" completes a request 10 ms after it arrived, so the
	// records of a transaction are still buffered when its last POST is
	// answered: the commit must wait until Feldera fed them to a step of
	// the transaction (without that wait, this variant breaks the
	// invariant).
	for _, name := range []string{"auto", "auto/slow", "off"} {
		mode, slow := name, name == "auto/slow"
		if slow {
			mode = connector.TxnAuto
		}
		t.Run(name, func(t *testing.T) {
			iv := &invariant{check: oracle.PgbenchSums}
			e := newEnvOn(t, pgcluster.Shared(t), "SELECT 1", oracle.PgbenchDDL, func(fc *felderatest.Config) {
				heavySteps(fc)
				fc.OnState = iv.see
			})
			if slow {
				e.fel.SetCompletionDelay(10 * time.Millisecond)
			}
			runTool(t, pgbench, "-i", "-s", "1", "-q", e.dsn)
			e.exec("CREATE PUBLICATION pub FOR TABLE pgbench_accounts, pgbench_tellers, pgbench_branches")
			cfg := e.config("pgbench_accounts,pgbench_tellers,pgbench_branches")
			cfg.Transactions = mode
			cfg.SnapshotMode = connector.SnapshotInitial
			c := e.newConnector(cfg, e.client)
			e.run(c)
			e.waitSlot()
			e.poll("the snapshot", 60*time.Second, func() bool { return e.fel.Len("pgbench_accounts") == 100_000 })
			// Two clients, rate-limited so the states stay countable.
			runTool(t, pgbench, "-n", "-T", "3", "-R", "200", "-c", "2", "-j", "1", e.dsn)
			e.waitConfirmed(e.currentLSN(), 90*time.Second)
			for _, tb := range []string{"pgbench_accounts", "pgbench_tellers", "pgbench_branches"} {
				e.assertEqual(tb, tb)
			}
			states, bad, first := iv.counts()
			t.Logf("FELDERA_TRANSACTIONS=%s: %d states exposed, %d broke the invariant (first: %s); Feldera transactions committed: %d",
				mode, states, bad, first, e.fel.TransactionsCommitted())
			switch mode {
			case connector.TxnAuto:
				if bad != 0 {
					t.Fatalf("%d of %d states Feldera exposed broke the invariant (first: %s)", bad, states, first)
				}
				if e.fel.TransactionsCommitted() == 0 {
					t.Fatal("no Feldera transaction committed")
				}
				sessionsOnly(t, e, c)
			case connector.TxnOff:
				if bad == 0 {
					t.Fatalf("none of %d states broke the invariant: the check cannot see a half-applied transaction", states)
				}
			}
			if id := e.fel.OpenTransaction(); id != 0 {
				t.Fatalf("Feldera transaction %d left open", id)
			}
		})
	}
}

// A source transaction larger than BATCH_MAX_ROWS goes out in several
// batches; inside one Feldera transaction none of it is visible until all
// of it is. With transactions off, states with part of it show up.
func TestStream_LargeTransactionInvisibleUntilWhole(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, mode := range []string{connector.TxnAuto, connector.TxnOff} {
		t.Run(mode, func(t *testing.T) {
			iv := &invariant{check: func(v felderatest.View) (bool, string) {
				n := v.Len("users")
				return n == 0 || n == 1000, fmt.Sprintf("%d of 1000 rows visible", n)
			}}
			e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) { fc.OnState = iv.see })
			e.fel.SetCompletionDelay(20 * time.Millisecond)
			cfg := e.config("users")
			cfg.BatchMaxRows = 100
			cfg.Transactions = mode
			c := e.newConnector(cfg, e.client)
			e.run(c)
			e.waitSlot()
			e.exec("INSERT INTO users SELECT g, 'u' || g, g FROM generate_series(1, 1000) g")
			e.waitConfirmed(e.currentLSN(), 60*time.Second)
			e.assertEqual("users", "users")
			states, bad, first := iv.counts()
			t.Logf("FELDERA_TRANSACTIONS=%s: %d states, %d partial (first: %s)", mode, states, bad, first)
			if mode == connector.TxnAuto && bad != 0 {
				t.Fatalf("%d states showed part of the transaction (first: %s)", bad, first)
			}
			if mode == connector.TxnOff && bad == 0 {
				t.Fatalf("no state showed part of the 10-batch transaction: the check cannot see one")
			}
			// pgfeldera_feldera_transactions_total
			if n := c.Stats().Transactions.Load(); mode == connector.TxnAuto && n == 0 || mode == connector.TxnOff && n != 0 {
				t.Fatalf("FELDERA_TRANSACTIONS=%s: %d Feldera transactions counted", mode, n)
			}
			if id := e.fel.OpenTransaction(); id != 0 {
				t.Fatalf("Feldera transaction %d left open", id)
			}
		})
	}
}

func runTool(t *testing.T, path string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", path, args, err, tail(string(out), 2000))
	}
}

// An input connector (Delta, Iceberg with transaction_mode) holds the
// pipeline's transaction: start_transaction joins it without a 409, the
// log says so, and the commit waits for that connector too. Nothing is
// visible until both committed; then everything is.
func TestStream_JoinsConnectorTransaction(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, nil)
	if err := e.fel.StartConnectorTransaction("orders.delta"); err != nil {
		t.Fatal(err)
	}
	cfg := e.config("users,public.items:catalog_items")
	e.start(cfg)
	e.waitSlot()
	e.exec("BEGIN; INSERT INTO users VALUES (1, 'a', 1); INSERT INTO items VALUES (1, 'eu', 1); COMMIT")
	e.waitLog("joined a Feldera transaction that input connectors started", 30*time.Second)
	time.Sleep(100 * time.Millisecond)
	if n := e.fel.Len("users"); n != 0 {
		t.Fatalf("%d rows visible while the connector's transaction is open", n)
	}
	if err := e.fel.CommitConnectorTransaction("orders.delta"); err != nil {
		t.Fatal(err)
	}
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	e.assertEqual("users", "users")
	e.assertEqual("items", "catalog_items")
	if id := e.fel.OpenTransaction(); id != 0 {
		t.Fatalf("Feldera transaction %d left open", id)
	}
}

// SNAPSHOT_TRANSACTION loads the initial snapshot inside one Feldera
// transaction: every state Feldera exposes has either none of the copy or
// all of it, in both tables. Without it, the copy shows up batch by batch.
func TestSnapshot_OneTransaction(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, inTxn := range []bool{true, false} {
		t.Run(fmt.Sprintf("snapshot_transaction=%v", inTxn), func(t *testing.T) {
			iv := &invariant{check: func(v felderatest.View) (bool, string) {
				u, i := v.Len("users"), v.Len("catalog_items")
				// 1001: the row inserted after the snapshot
				return u == 0 && i == 0 || (u == 1000 || u == 1001) && i == 500, fmt.Sprintf("users %d of 1000, items %d of 500", u, i)
			}}
			e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) { fc.OnState = iv.see })
			e.fel.SetCompletionDelay(5 * time.Millisecond)
			e.exec("INSERT INTO users SELECT g, 'u' || g, g FROM generate_series(1, 1000) g")
			e.exec("INSERT INTO items SELECT g, 'eu', g FROM generate_series(1, 500) g")
			cfg := e.config("users,public.items:catalog_items")
			cfg.SnapshotMode = connector.SnapshotInitial
			cfg.SnapshotTransaction = inTxn
			cfg.BatchMaxRows = 100
			e.start(cfg)
			e.waitSlot()
			e.poll("the snapshot", 60*time.Second, func() bool { return e.fel.Len("users") == 1000 && e.fel.Len("catalog_items") == 500 })
			e.exec("INSERT INTO users VALUES (5000, 'after', 1)")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			e.assertEqual("users", "users")
			e.assertEqual("items", "catalog_items")
			states, bad, first := iv.counts()
			t.Logf("SNAPSHOT_TRANSACTION=%v: %d states, %d partial (first: %s); Feldera transactions committed: %d", inTxn, states, bad, first, e.fel.TransactionsCommitted())
			if inTxn && bad != 0 {
				t.Fatalf("%d states showed part of the snapshot (first: %s)", bad, first)
			}
			if !inTxn && bad < 3 {
				t.Fatalf("only %d partial states: the check cannot see a snapshot arriving batch by batch", bad)
			}
			if id := e.fel.OpenTransaction(); id != 0 {
				t.Fatalf("Feldera transaction %d left open", id)
			}
		})
	}
}

// A source transaction that takes longer to send than
// FELDERA_COMPLETION_TIMEOUT: its batches cannot complete before the
// Feldera transaction commits, so their completion timeout counts from
// the commit, not from their POSTs (otherwise a large enough transaction
// could never be delivered).
func TestStream_TransactionLongerThanCompletionTimeout(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, nil)
	e.fel.SetCompletionDelay(2 * time.Millisecond)
	cfg := e.config("users")
	cfg.BatchMaxRows = 20
	cfg.CompletionTimeout = 300 * time.Millisecond
	c := e.newConnector(cfg, e.client)
	r := e.run(c)
	e.waitSlot()
	// What the test is about: sending the transaction takes longer than
	// FELDERA_COMPLETION_TIMEOUT (the first batch's token completes only
	// at the commit, after the last POST). How long sending takes depends
	// on the machine, so a transaction that went faster is followed by
	// one of rows twice as wide (as many batches: one Feldera
	// transaction holds at most maxTxnFlight), until one takes longer.
	const n = 15000 // 750 batches, one Feldera transaction
	from, width := 1, 0
	for took := time.Duration(0); took <= cfg.CompletionTimeout; width = max(2*width, 256) {
		if width > 8192 {
			t.Fatalf("sending %d rows took %s, not longer than FELDERA_COMPLETION_TIMEOUT (%s): the test shows nothing", n, took, cfg.CompletionTimeout)
		}
		before, txns := len(e.fel.Requests()), c.Stats().Transactions.Load()
		e.exec(fmt.Sprintf("INSERT INTO users SELECT g, 'u' || g || repeat('x', %d), g FROM generate_series(%d, %d) g", width, from, from+n-1))
		from += n
		e.waitConfirmed(e.currentLSN(), 120*time.Second)
		e.assertEqual("users", "users")
		if strings.Contains(e.logs.String(), "not complete after") {
			t.Fatalf("a batch of the transaction timed out before its commit:\n%s", tail(e.logs.String(), 3000))
		}
		if got := c.Stats().Transactions.Load() - txns; got != 1 {
			t.Fatalf("%d Feldera transactions, want the source transaction in one", got)
		}
		reqs := e.fel.Requests()[before:]
		if len(reqs) < 2 {
			t.Fatalf("%d requests", len(reqs))
		}
		took = reqs[len(reqs)-1].Time.Sub(reqs[0].Time)
		t.Logf("%d rows of names %d bytes wider: sending took %s", n, width, took)
	}
	sessionsOnly(t, e, c)
	r.stop(t)
}

package connector_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/state"
)

// A process that crashed with a Feldera transaction open leaves the API's
// initiator taken, and its record in the fence file. The next process
// settles it before it sends anything (every table keyed: it joins it,
// and commits it at the join's end); the broken variant ignores the
// record, and then every start_transaction is answered 409 and nothing it
// wraps in a transaction ever lands.
func TestStartup_SettlesTheTransactionLeftOpen(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, ignore := range []bool{false, true} {
		name := "settled"
		if ignore {
			name = "ignored_BROKEN"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			cfg := e.config("users,public.items:catalog_items")
			cfg.Transactions = connector.TxnAuto
			cfg.CompletionTimeout = 3 * time.Second
			ctx := context.Background()
			// The crashed process's transaction, and its record.
			id, err := e.client.StartTransaction(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := state.SaveFence(state.FencePath(cfg.StateFile), &state.Fence{Running: true, PID: 1,
				Transaction: &state.OpenTransaction{ID: id, Incarnation: e.fel.Incarnation(), Since: time.Now()}}); err != nil {
				t.Fatal(err)
			}
			c := e.newConnector(cfg, e.client)
			if ignore {
				connector.IgnoreTransactionLeftOpen(c)
			}
			e.run(c)
			e.waitSlot()
			conflicts := e.fel.TransactionConflicts()
			for i := 1; i <= 20; i++ { // two tables each: wrapped in a Feldera transaction
				e.exec(fmt.Sprintf("BEGIN; INSERT INTO users VALUES (%d, 'a', %d); INSERT INTO items VALUES (%d, 'eu', %d); COMMIT", i, i, i, i))
			}
			if ignore {
				e.poll("start_transaction refused 20 times", 60*time.Second, func() bool { return e.fel.TransactionConflicts()-conflicts >= 20 })
				if e.diff("users", "users") == "" {
					t.Fatal("ignoring the transaction left open, the restart still delivered everything: the test cannot see it")
				}
				t.Logf("ignored: %d start_transaction requests answered 409, users not delivered", e.fel.TransactionConflicts()-conflicts)
				return
			}
			e.waitConfirmed(e.currentLSN(), 60*time.Second)
			e.assertEqual("users", "users")
			e.assertEqual("items", "catalog_items")
			// Every table is keyed: the restart joins it (a replay into it
			// is harmless) and commits it whole at the join's end.
			if !strings.Contains(e.logs.String(), "joining the Feldera transaction left open") {
				t.Fatalf("the restart did not join the transaction left open\n%s", tail(e.logs.String(), 3000))
			}
			if n := e.fel.TransactionConflicts() - conflicts; n > 2 {
				t.Fatalf("%d start_transaction requests answered 409", n)
			}
			if open := e.fel.OpenTransaction(); open != 0 {
				t.Fatalf("Feldera transaction %d still open after catching up", open)
			}
		})
	}
}

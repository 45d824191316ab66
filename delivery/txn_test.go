package delivery_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/state"
)

// doubleWith is a Feldera double declaring ddl as pipeline p, and a
// client of it; the double closes with the test.
func doubleWith(t *testing.T, ddl string) (*felderatest.Server, *feldera.Client) {
	t.Helper()
	fel, err := felderatest.NewServer(felderatest.Config{Pipeline: "p", Tables: felderatest.MustParseDDL(ddl)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fel.Close)
	client, err := feldera.New(feldera.Config{URL: fel.URL, Pipeline: "p"})
	if err != nil {
		t.Fatal(err)
	}
	return fel, client
}

type nopObserver struct{}

func (nopObserver) Batch(int, time.Duration, time.Duration) {}
func (nopObserver) FelderaError(string)                     {}

// A start_transaction of ours that reached a Feldera process which
// restarted after the session learnt its incarnation left a transaction
// open there, recorded under the old incarnation. Settle finds it in the
// new process (it names it as the API's, under its id) and joins it, or
// commits it; taken for one the restart dropped, it stays open, and every
// later start_transaction is answered 409.
func TestSettle_FindsATransactionOpenedAfterARestart(t *testing.T) {
	for _, join := range []bool{true, false} {
		t.Run(map[bool]string{true: "join", false: "commit"}[join], func(t *testing.T) {
			fel, client := doubleWith(t, `CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY);`)
			ctx := context.Background()
			old := fel.Incarnation()
			fel.RestartInPlace()
			id, err := client.StartTransaction(ctx)
			if err != nil {
				t.Fatal(err)
			}
			logger := slog.New(slog.NewTextHandler(io.Discard, nil))
			x := &delivery.Transactions{API: client, Fence: delivery.NewFence(time.Second, logger), Observer: nopObserver{}, Logger: logger,
				CompletionTimeout: 5 * time.Second, CommitStallTimeout: 5 * time.Second}
			x.LeftOpen(state.OpenTransaction{ID: id, Incarnation: old})
			var tables map[string]bool
			if join {
				tables = map[string]bool{"users": true}
			}
			if err := x.Settle(ctx, tables); err != nil {
				t.Fatal(err)
			}
			switch {
			case join && (!x.Held() || x.ID() != id):
				t.Fatalf("transaction %d, open in the new process, was not joined (held %v, id %d)", id, x.Held(), x.ID())
			case !join && (x.Held() || fel.OpenTransaction() != 0):
				t.Fatalf("transaction %d, open in the new process, was not committed (held %v, Feldera's open one %d)", id, x.Held(), fel.OpenTransaction())
			}
		})
	}
}

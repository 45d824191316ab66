package delivery_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/state"
)

// A process posts five records of a keyless table in a Feldera
// transaction, then six more of which Feldera keeps the first three and
// answers 503, and dies. The next process joins the transaction and
// skips the replay's first eight records of the table, which Feldera
// holds: five answered, three of a POST that got no count back. After a
// Feldera restart (the transaction dropped) it skips nothing.
func TestTransactions_JoinSkipsWhatTheEndpointsTook(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "joined", true: "feldera_restarted"}[restart], func(t *testing.T) {
			fel, client := doubleWith(t, `CREATE TABLE events (id INT, v VARCHAR);`)
			ctx := context.Background()
			stateFile := filepath.Join(t.TempDir(), "state.json")
			// Another client's records before: the count is the endpoint's, not ours.
			if _, err := client.Ingress(ctx, "events", lines(0, 4)); err != nil {
				t.Fatal(err)
			}
			x, fence := counting(t, client, stateFile, fel.Incarnation())
			if err := x.Resume(0, true); err != nil { // the session read no progress row
				t.Fatal(err)
			}
			if err := x.Begin(ctx); err != nil {
				t.Fatal(err)
			}
			post := func(body []byte) error {
				if err := x.Posting(ctx, "events"); err != nil {
					t.Fatal(err)
				}
				_, err := fence.Ingress(ctx, client, "events", body, strings.Count(string(body), "\n"))
				return err
			}
			if err := post(lines(10, 5)); err != nil {
				t.Fatal(err)
			}
			fel.InjectFault(felderatest.Fault{Kind: felderatest.PartialThen503, Path: "ingress"})
			if err := post(lines(20, 6)); err == nil {
				t.Fatal("the POST Feldera took in part was answered 200")
			}
			fel.ClearFaults()
			f, err := state.LoadFence(state.FencePath(stateFile)) // the process dies here
			if err != nil {
				t.Fatal(err)
			}
			if f.Transaction == nil || f.Past == nil || f.Past.Taken["events"] != 4 {
				t.Fatalf("the fence record does not count events from 4 past the row: %+v, %+v", f.Transaction, f.Past)
			}
			if restart {
				fel.RestartInPlace()
			}
			x2, fence2 := counting(t, client, stateFile, fel.Incarnation())
			x2.LeftOpen(*f.Transaction)
			x2.LeftPast(fence2.LeftPast()) // the fence file carries it to the next process
			if err := x2.Settle(ctx, map[string]bool{"events": true}); err != nil {
				t.Fatal(err)
			}
			if err := x2.Resume(0, true); err != nil {
				t.Fatal(err)
			}
			if restart {
				if err := x2.Posting(ctx, "events"); err != nil {
					t.Fatal(err)
				}
				if x2.Held() || x2.Skip("events", 20) != 0 {
					t.Fatal("a transaction Feldera's restart dropped was joined or skips records")
				}
				return
			}
			if !x2.Held() {
				t.Fatal("the transaction left open was not joined")
			}
			if err := x2.Posting(ctx, "events"); err != nil {
				t.Fatal(err)
			}
			if got := x2.Skip("events", 6) + x2.Skip("events", 6); got != 8 {
				t.Fatalf("the replay skips %d records of events, want the 8 Feldera holds", got)
			}
			if err := x2.Covered(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// counting is a Transactions over client whose fence file goes with
// stateFile, counting table events.
func counting(t *testing.T, client *feldera.Client, stateFile, incarnation string) (*delivery.Transactions, *delivery.Fence) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	fence := delivery.NewFence(50*time.Millisecond, logger)
	if _, err := fence.Open(stateFile); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fence.Close)
	return &delivery.Transactions{API: client, Fence: fence, Observer: nopObserver{}, Logger: logger, Incarnation: incarnation,
		Counted: map[string]bool{"events": true}, Started: new(atomic.Int64), Conflicts: new(atomic.Int64),
		CompletionTimeout: 5 * time.Second, CommitStallTimeout: 5 * time.Second}, fence
}

// lines is n insert records of events from id.
func lines(id, n int) []byte {
	var b strings.Builder
	for i := range n {
		b.WriteString(`{"insert":{"id":` + strconv.Itoa(id+i) + `,"v":"x"}}` + "\n")
	}
	return []byte(b.String())
}

// A POST Feldera answered 400 with parse errors leaves no count of its
// table past the progress row: Feldera counted only the records it
// parsed, so a next process skipping that many lines would skip past the
// refused record and lose it. Uncounted, the replay sends the body again
// and meets the refusal again.
func TestTransactions_ParseErrorsLeaveTheTableUncounted(t *testing.T) {
	fel, client := doubleWith(t, `CREATE TABLE events (id INT, v VARCHAR);`)
	ctx := context.Background()
	stateFile := filepath.Join(t.TempDir(), "state.json")
	x, fence := counting(t, client, stateFile, fel.Incarnation())
	if err := x.Resume(0, true); err != nil {
		t.Fatal(err)
	}
	s := &delivery.Sender{Sink: client, Fence: fence, Txns: x, Observer: nopObserver{}, Logger: x.Logger}
	targets := []*decode.Target{{Route: 0, Dest: feldera.Relation{Name: "events"}}}
	send := func(body []byte) error {
		b := delivery.NewBatch(1)
		b.Bufs[0] = append(b.Bufs[0], body...)
		b.Added(0, strings.Count(string(body), "\n"), time.Now())
		_, _, _, err := s.Send(ctx, targets, b, delivery.TxnPlan{})
		return err
	}
	if err := send(lines(10, 3)); err != nil {
		t.Fatal(err)
	}
	bad := append(lines(20, 2), []byte(`{"insert":{"id":"not a number","v":"x"}}`+"\n")...)
	bad = append(bad, lines(30, 2)...)
	if err := send(bad); !feldera.IsParseErrors(err) {
		t.Fatalf("the body with a bad record: %v, want parse errors", err)
	}
	f, err := state.LoadFence(state.FencePath(stateFile)) // the process dies here
	if err != nil {
		t.Fatal(err)
	}
	if f.Past == nil {
		t.Fatal("no record past the progress row")
	}
	if n, ok := f.Past.Taken["events"]; ok {
		t.Fatalf("the fence record counts events from %d past the row after a POST with parse errors: the next process would skip past the refused record", n)
	}
}

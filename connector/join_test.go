package connector

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgoutputtest"
	"github.com/pgfeldera/pgfeldera/internal/waitfor"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/state"
)

// A Feldera transaction a crash or a failed POST left open holds a prefix
// of a flush: after a crash, a whole source transaction and the first two
// rows of the next; after a failure, two rows of the second. The next
// session joins it, replays into it, and commits it once the replay has
// carried everything the server had when it began, with the progress
// row: no state the double shows holds a source transaction in part, or
// other transactions than its progress row says. Committed at the first
// replayed COMMIT instead, it would show the second transaction's first
// rows. The unsafe variants (noJoin) commit the prefix, at the start or
// on the failure, as without the progress row, and the test sees it.
func TestScripted_ProgressJoinsTheTransactionACrashLeftOpen(t *testing.T) {
	for _, c := range []struct {
		name            string
		failure, noJoin bool
	}{{"crash", false, false}, {"crash/noJoin", false, true}, {"failure", true, false}, {"failure/noJoin", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			txns := map[pglogrepl.LSN][]string{0x2010: {"1", "2"}, 0x3010: {"3", "4", "5"}, 0x4010: {"6"}}
			var mu sync.Mutex
			var bad []string
			fc := withPipeline(felderatest.Config{OnState: func(v felderatest.View) {
				p := progressOf(v.Rows("pgfeldera_progress"))
				var want, got []string
				for end, ids := range txns {
					if end <= p {
						want = append(want, ids...)
					}
				}
				for _, r := range v.Rows("users") {
					got = append(got, string(r["id"]))
				}
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("progress %s, users %v", p, got))
					mu.Unlock()
				}
			}})
			fel, err := felderatest.NewServer(fc)
			if err != nil {
				t.Fatal(err)
			}
			defer fel.Close()
			leave := leaveByCrash
			if c.failure {
				leave = leaveByFailure
			}
			left := leave(t, fc, fel, c.noJoin)

			o := scriptOptsUnsafe(withProgress(fel), false)
			plan := o.plan
			inc := fel.Incarnation()
			o.plan = func(p *setup.Plan, cn *Connector) {
				plan(p, cn)
				cn.txns.LeftOpen(state.OpenTransaction{ID: left, Incarnation: inc}) // the fence file's record
				cn.test.NoJoin = c.noJoin
			}
			second := runScriptedWith(t, fc, nil, o)
			second.transaction(0x2000, 0x2010, "1", "2")
			second.transaction(0x3000, 0x3010, "3", "4", "5")
			second.transaction(0x4000, 0x4010, "6")
			second.src.in <- pgoutputtest.Keepalive(0x4010, true)
			second.src.waitWritten(t, 0x4010)
			if n := fel.Len("users"); !c.noJoin && n != map[bool]int{false: 0, true: 2}[c.failure] {
				t.Fatalf("Feldera shows %d rows before the replay reached the server's WAL end, want only the committed ones", n)
			}
			second.src.in <- pgoutputtest.Keepalive(0x6000, true) // the walsender sent everything up to the WAL end
			waitRows(t, fel, 6)
			if p := progressOf(fel.Rows("pgfeldera_progress")); p != 0x4010 {
				t.Fatalf("progress row %s once the joined transaction committed, want 0/4010", p)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case !c.noJoin && len(bad) > 0:
				t.Fatalf("states hold other transactions than their progress row says: %v", bad)
			case c.noJoin && len(bad) == 0:
				t.Fatal("without the join, no state showed the prefix left open: the test cannot see it")
			}
		})
	}
}

// leaveByCrash runs a session whose batch of four rows is sealed inside
// the second source transaction: its Feldera transaction holds the first
// and two rows of the second when the session dies, and its stop commits
// nothing. It returns the transaction's id.
func leaveByCrash(t *testing.T, fc felderatest.Config, fel *felderatest.Server, _ bool) int64 {
	crash, crashNow := context.WithCancel(context.Background())
	o := withProgress(fel)
	plan := o.plan
	o.plan = func(p *setup.Plan, c *Connector) {
		plan(p, c)
		c.hardStop = crash
	}
	first := runScriptedWith(t, fc, func(c *Config) { c.BatchMaxRows, c.BatchLinger = 4, time.Hour }, o)
	sendFirstAndAHalf(t, first, fel)
	crashNow()
	first.end()
	left := first.c.txns.ID()
	if left == 0 || fel.Len("users") != 0 {
		t.Fatalf("the first session left no Feldera transaction open (id %d, %d rows shown)", left, fel.Len("users"))
	}
	return left
}

// leaveByFailure runs a session that commits the first source transaction
// and sends two rows of the second in a Feldera transaction; the POST of
// the last row fails, and the session ends with the transaction open, or
// committed (noJoin: committing on failure, as without the progress
// row). It returns the transaction's id.
func leaveByFailure(t *testing.T, fc felderatest.Config, fel *felderatest.Server, noJoin bool) int64 {
	o := withProgress(fel)
	plan := o.plan
	o.plan = func(p *setup.Plan, c *Connector) {
		plan(p, c)
		c.test.CommitOnFailure = noJoin
	}
	first := runScriptedWith(t, fc, func(c *Config) { c.BatchMaxRows, c.BatchLinger = 2, time.Hour }, o)
	sendFirstAndAHalf(t, first, fel)
	fel.InjectFault(felderatest.Fault{Kind: felderatest.FailStatus, Path: "ingress", Status: 400, Code: "InvalidRequest"})
	first.src.push(0x3010, pgoutputtest.Commit(0x3000, 0x3010, time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)))
	select {
	case err := <-first.done:
		if err == nil {
			t.Fatal("the session ended without an error")
		}
		first.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("the failed POST did not end the session")
	}
	fel.ClearFaults()
	left := first.c.txns.ID()
	if !noJoin && (left == 0 || fel.Len("users") != 2) {
		t.Fatalf("the failed session left no Feldera transaction open (id %d, %d rows shown)", left, fel.Len("users"))
	}
	return left
}

// sendFirstAndAHalf pushes the first source transaction (rows 1 and 2)
// and the second's rows 3 to 5 without its COMMIT, and waits until
// Feldera took four rows.
func sendFirstAndAHalf(t *testing.T, first *scripted, fel *felderatest.Server) {
	first.transaction(0x2000, 0x2010, "1", "2")
	at := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	first.src.push(0x3000, pgoutputtest.Begin(0x3000, at, 701))
	for _, id := range []string{"3", "4", "5"} {
		first.src.push(0x3000, pgoutputtest.Insert(10, id, "n"+id))
	}
	waitPosted(t, fel, 4)
}

// waitPosted waits until Feldera's users endpoint took n records, in a
// transaction or not.
func waitPosted(t *testing.T, fel *felderatest.Server, n int) {
	t.Helper()
	posted := func() int {
		m := 0
		for _, k := range fel.InsertsByKey("users") {
			m += k
		}
		return m
	}
	if !waitfor.Until(10*time.Second, time.Millisecond, posted, func() bool { return posted() >= n }) {
		t.Fatalf("Feldera took %d records for users, want %d", posted(), n)
	}
}

// A source COMMIT that arrives while a POST of its Feldera transaction
// runs ends the transaction as soon as the POST returns: the batch that
// carries the COMMIT goes then, not at its linger (an hour here), which
// would hold the Feldera transaction open, and every checkpoint with it.
func TestScripted_CommitDuringAPostEndsTheTransaction(t *testing.T) {
	fc := felderatest.Config{}
	sc := runScripted(t, fc, func(c *Config) { c.BatchMaxRows, c.BatchLinger = 2, time.Hour })
	sc.fel.InjectFault(felderatest.Fault{Kind: felderatest.HangThenApply, Path: "ingress", Count: 1})
	at := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	sc.src.push(0x2000, pgoutputtest.Begin(0x2000, at, 700))
	for _, id := range []string{"1", "2", "3"} {
		sc.src.push(0x2000, pgoutputtest.Insert(10, id, "n"+id))
	}
	// The first two rows' POST, inside a Feldera transaction, hangs.
	if !waitfor.Until(10*time.Second, time.Millisecond, sc.fel.Held, func() bool { return sc.fel.Held() == 1 }) {
		t.Fatal("no POST held")
	}
	sc.src.push(0x2010, pgoutputtest.Commit(0x2000, 0x2010, at))
	sc.src.in <- pgoutputtest.Keepalive(0x2010, true)
	sc.src.waitWritten(t, 0x2010) // the loop read the COMMIT while the POST hung
	sc.fel.ClearFaults()
	waitRows(t, sc.fel, 3)
	sc.src.waitFlushed(t, 0x2010)
}

// With no progress row yet (a new slot, a cleared row), what Feldera
// holds of the first transaction is counted from the slot's position: a
// crash inside it leaves four records in a Feldera transaction that the
// restart joins, and the restart sends none of them again. Counted from
// no row, it sent them twice, which a keyless table keeps.
func TestScripted_ProgressCountsFromTheSlotWithoutARow(t *testing.T) {
	fc := withPipeline(felderatest.Config{})
	fel, err := felderatest.NewServer(fc)
	if err != nil {
		t.Fatal(err)
	}
	defer fel.Close()
	stateFile := filepath.Join(t.TempDir(), "state.json")
	crash, crashNow := context.WithCancel(context.Background())
	o := withProgress(fel)
	o.stateFile = stateFile
	plan := o.plan
	o.plan = func(p *setup.Plan, c *Connector) {
		plan(p, c)
		c.hardStop = crash
	}
	// The stop's POST of the last row, cut by the crash, fences ingress
	// for FELDERA_INGRESS_FENCE.
	short := func(c *Config) { c.BatchMaxRows, c.BatchLinger, c.IngressFence = 4, time.Hour, time.Second }
	first := runScriptedWith(t, fc, short, o)
	sendFirstAndAHalf(t, first, fel)
	crashNow()
	first.end()
	if n := len(fel.Rows("pgfeldera_progress")); n != 0 || first.c.txns.ID() == 0 {
		t.Fatalf("the first session left %d progress rows and transaction %d open, want none and one", n, first.c.txns.ID())
	}

	o = withProgress(fel)
	o.stateFile = stateFile
	plan = o.plan
	o.plan = func(p *setup.Plan, c *Connector) {
		plan(p, c)
		c.srv.WALEnd = 0x4010 // the server's WAL end at the start: past all the first session sent
	}
	second := runScriptedWith(t, fc, short, o)
	second.transaction(0x2000, 0x2010, "1", "2")
	second.transaction(0x3000, 0x3010, "3", "4", "5")
	second.transaction(0x4000, 0x4010, "6")
	second.src.in <- pgoutputtest.Keepalive(0x6000, true)
	if !waitfor.Until(10*time.Second, time.Millisecond, func() int { return fel.Len("users") }, func() bool { return fel.Len("users") == 6 }) {
		t.Fatalf("Feldera holds %d rows of users, want 6 (session: %v)", fel.Len("users"), second.end())
	}
	for key, n := range fel.InsertsByKey("users") {
		if n != 1 {
			t.Errorf("key %s inserted %d times, want once: the restart sent again what Feldera held past the slot", key, n)
		}
	}
}

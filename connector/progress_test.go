package connector

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/cause"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgoutputtest"
	"github.com/pgfeldera/pgfeldera/internal/waitfor"
	"github.com/pgfeldera/pgfeldera/setup"
)

// progressTxns are source transactions: the keys each inserts, by the
// end LSN of its commit record.
var progressTxns = []struct {
	commit, end pglogrepl.LSN
	ids         []string
}{
	{0x2000, 0x2010, []string{"1", "2"}},
	{0x3000, 0x3010, []string{"3"}},
	{0x4000, 0x4010, []string{"4", "5", "6"}},
	{0x5000, 0x5010, []string{"7"}},
}

// withProgress is a scripted session whose pipeline declares the progress
// table.
func withProgress(fel *felderatest.Server) scriptOpts {
	return scriptOpts{ddl: setup.ProgressDDL, fel: fel, plan: func(p *setup.Plan, c *Connector) {
		rel := felderatest.MustParseDDL(setup.ProgressDDL)[0]
		p.Progress = &rel
	}}
}

// progressOf is the progress row of slot s in a state of the double.
func progressOf(rows []felderatest.Row) pglogrepl.LSN {
	for _, r := range rows {
		if string(r["slot"]) == `"s"` {
			n, _ := strconv.ParseUint(string(r["lsn"]), 10, 64)
			return pglogrepl.LSN(n)
		}
	}
	return 0
}

// Every state the pipeline shows holds exactly the source transactions at
// or below its progress row: the row is the last record of the Feldera
// transaction that carries their rows. A transaction cut across batches
// (BATCH_MAX_ROWS=2) keeps its Feldera transaction open until its COMMIT.
func TestScripted_ProgressRowCommittedWithTheData(t *testing.T) {
	var mu sync.Mutex
	var bad []string
	states := 0
	fc := felderatest.Config{OnState: func(v felderatest.View) {
		p := progressOf(v.Rows("pgfeldera_progress"))
		var want []string
		for _, tx := range progressTxns {
			if tx.end <= p {
				want = append(want, tx.ids...)
			}
		}
		var got []string
		for _, r := range v.Rows("users") {
			got = append(got, string(r["id"]))
		}
		slices.Sort(got)
		slices.Sort(want)
		mu.Lock()
		defer mu.Unlock()
		states++
		if !slices.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("progress %s, users %v", p, got))
		}
	}}
	fel, err := felderatest.NewServer(withPipeline(fc))
	if err != nil {
		t.Fatal(err)
	}
	defer fel.Close()
	sc := runScriptedWith(t, fc, func(c *Config) { c.BatchMaxRows = 2 }, withProgress(fel))
	for _, tx := range progressTxns {
		sc.transaction(tx.commit, tx.end, tx.ids...)
	}
	sc.src.waitFlushed(t, 0x5010)
	if p := progressOf(fel.Rows("pgfeldera_progress")); p != 0x5010 {
		t.Fatalf("progress row %s after the last transaction, want 0/5010", p)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 || states == 0 {
		t.Fatalf("%d of %d states hold other transactions than their progress row says: %v", len(bad), states, bad)
	}
}

// A session that finds the progress row ahead of the slot skips, whole,
// the source transactions Feldera holds: a replay sends none of them
// again. The unsafe variant (noSkip) sends them again, which the test
// sees.
func TestScripted_ProgressSkipsWhatFelderaHolds(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		t.Run(map[bool]string{false: "skip", true: "noSkip"}[unsafe], func(t *testing.T) {
			fc := withPipeline(felderatest.Config{})
			fel, err := felderatest.NewServer(fc)
			if err != nil {
				t.Fatal(err)
			}
			defer fel.Close()
			first := runScriptedWith(t, fc, nil, withProgress(fel))
			for _, tx := range progressTxns[:3] {
				first.transaction(tx.commit, tx.end, tx.ids...)
			}
			first.src.waitFlushed(t, 0x4010)
			first.end()
			// The slot never heard of it: the next session replays from
			// its start.
			o := withProgress(fel)
			second := runScriptedWith(t, fc, nil, scriptOptsUnsafe(o, unsafe))
			for _, tx := range progressTxns {
				second.transaction(tx.commit, tx.end, tx.ids...)
			}
			second.src.waitFlushed(t, 0x5010)
			again := 0
			for id, n := range fel.InsertsByKey("users") {
				if n > 1 {
					again += n - 1
				}
				if n == 0 {
					t.Fatalf("key %s never sent", id)
				}
			}
			if n := fel.Len("users"); n != 7 {
				t.Fatalf("Feldera holds %d rows, want 7", n)
			}
			switch {
			case !unsafe && again != 0:
				t.Fatalf("%d rows Feldera held were sent again", again)
			case unsafe && again != 6:
				t.Fatalf("without the skip, %d rows were sent again, want 6: the test cannot see a replay", again)
			}
		})
	}
}

// scriptOptsUnsafe sets the noSkip hook on the session o starts, whose
// server's WAL end (when it began) lies past every transaction replayed.
func scriptOptsUnsafe(o scriptOpts, unsafe bool) scriptOpts {
	plan := o.plan
	o.plan = func(p *setup.Plan, c *Connector) {
		plan(p, c)
		c.test.noSkip = unsafe
		c.srv.WALEnd = 0x6000
	}
	return o
}

// withPipeline is fc as runScriptedWith configures it, with the progress
// table.
func withPipeline(fc felderatest.Config) felderatest.Config {
	fc.Pipeline = "p"
	fc.Tables = felderatest.MustParseDDL(`CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR);` + setup.ProgressDDL)
	return fc
}

// Under the checkpoint gate (at_least_once) the skip's acknowledgement
// waits for a checkpoint that holds the row it skipped below: the row
// can be in Feldera's state and in no checkpoint. A checkpoint taken
// before the row was written (here after the first transaction) releases
// nothing of it. The unsafe variant (noProgressStep) acknowledges the
// skipped transactions at once, and a restart in place then restores a
// state without them while the slot has moved past them: they are lost.
func TestScripted_ProgressSkipWaitsForACheckpointHoldingTheRow(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		t.Run(map[bool]string{false: "step", true: "noProgressStep"}[unsafe], func(t *testing.T) {
			fc := withPipeline(felderatest.Config{FaultTolerance: `{"model": "at_least_once", "checkpoint_interval_secs": null}`})
			fel, err := felderatest.NewServer(fc)
			if err != nil {
				t.Fatal(err)
			}
			defer fel.Close()
			hour := func(c *Config) { c.CheckpointAfter = time.Hour }
			// The first session ends as in a crash: its stop takes no
			// checkpoint (its hard stop has passed already).
			crash, crashNow := context.WithCancel(context.Background())
			o := atLeastOnce(t, scriptOptsUnsafe(withProgress(fel), false), false)
			plan := o.plan
			o.plan = func(p *setup.Plan, c *Connector) {
				plan(p, c)
				c.hardStop = crash
			}
			first := runScriptedWith(t, fc, hour, o)
			first.transaction(progressTxns[0].commit, progressTxns[0].end, progressTxns[0].ids...)
			waitRows(t, fel, 2)
			if err := fel.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			for _, tx := range progressTxns[1:3] {
				first.transaction(tx.commit, tx.end, tx.ids...)
			}
			waitRows(t, fel, 6)
			crashNow()
			first.end()

			second := runScriptedWith(t, fc, hour, atLeastOnce(t, scriptOptsUnsafe(withProgress(fel), false), unsafe))
			for _, tx := range progressTxns {
				second.transaction(tx.commit, tx.end, tx.ids...)
			}
			waitRows(t, fel, 7)
			for id, n := range fel.InsertsByKey("users") {
				if n != 1 {
					t.Fatalf("key %s sent %d times: the skip did not hold under at_least_once", id, n)
				}
			}
			if unsafe {
				second.src.waitFlushed(t, 0x4010)
				fel.RestartInPlace()
				if n := fel.Len("users"); n != 2 {
					t.Fatalf("after the restart Feldera holds %d rows, want the checkpoint's 2", n)
				}
				return // the slot is past 0/4010: rows 3 to 6 are in no state and no WAL
			}
			second.src.in <- pgoutputtest.Keepalive(0x5010, true) // the answer says the loop read the last COMMIT
			second.src.waitWritten(t, 0x5010)
			if got := second.src.flushed(); got >= progressTxns[0].end {
				t.Fatalf("the skipped transactions were acknowledged (flush %s) before a checkpoint held the progress row", got)
			}
			if err := fel.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			second.src.waitFlushed(t, 0x5010)
		})
	}
}

// A Feldera restart between the plan and the progress row's read ends the
// session, which reads the row again: the step count read after the row
// counts in another process, and a checkpoint of it may not hold the row.
func TestScripted_ProgressReadAcrossARestartEndsTheSession(t *testing.T) {
	fc := withPipeline(felderatest.Config{FaultTolerance: `{"model": "at_least_once", "checkpoint_interval_secs": null}`})
	fel, err := felderatest.NewServer(fc)
	if err != nil {
		t.Fatal(err)
	}
	defer fel.Close()
	hour := func(c *Config) { c.CheckpointAfter = time.Hour }
	first := runScriptedWith(t, fc, hour, atLeastOnce(t, scriptOptsUnsafe(withProgress(fel), false), false))
	first.transaction(0x2000, 0x2010, "1")
	waitRows(t, fel, 1)
	first.end() // its graceful stop's checkpoint keeps the row across the restart below

	var readErr error
	o := atLeastOnce(t, scriptOptsUnsafe(withProgress(fel), false), false)
	plan := o.plan
	o.plan = func(p *setup.Plan, c *Connector) {
		plan(p, c)
		fel.RestartInPlace() // after the plan learned the process
	}
	o.readErr = &readErr
	if sc := runScriptedWith(t, fc, hour, o); sc != nil || readErr == nil {
		t.Fatal("a progress row read across a Feldera restart started a session")
	}
	if cause.Of(readErr) != cause.Feldera || !strings.Contains(readErr.Error(), "restarted") {
		t.Fatalf("error %v (cause %s), want Feldera's restart", readErr, cause.Of(readErr))
	}
}

// atLeastOnce is o under the checkpoint gate, in the double's process;
// unsafe sets the noProgressStep hook.
func atLeastOnce(t *testing.T, o scriptOpts, unsafe bool) scriptOpts {
	plan := o.plan
	o.plan = func(p *setup.Plan, c *Connector) {
		if plan != nil {
			plan(p, c)
		}
		st, err := c.sink.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p.Gate, p.Model, p.FaultTolerant, p.Incarnation = GateCheckpoint, feldera.FTAtLeastOnce, true, st.GlobalMetrics.IncarnationUUID
		c.gate.Store(int32(GateCheckpoint))
		c.test.noProgressStep = unsafe
	}
	return o
}

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
				cn.txns.LeftOpen(left, inc) // the fence file's record
				cn.test.noJoin = c.noJoin
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
	first.transaction(0x2000, 0x2010, "1", "2")
	at := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	first.src.push(0x3000, pgoutputtest.Begin(0x3000, at, 701))
	for _, id := range []string{"3", "4", "5"} {
		first.src.push(0x3000, pgoutputtest.Insert(10, id, "n"+id))
	}
	waitPosted(t, fel, 4)
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
		c.out.CommitOnFailure = noJoin
	}
	first := runScriptedWith(t, fc, func(c *Config) { c.BatchMaxRows, c.BatchLinger = 2, time.Hour }, o)
	first.transaction(0x2000, 0x2010, "1", "2")
	at := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	first.src.push(0x3000, pgoutputtest.Begin(0x3000, at, 701))
	for _, id := range []string{"3", "4", "5"} {
		first.src.push(0x3000, pgoutputtest.Insert(10, id, "n"+id))
	}
	waitPosted(t, fel, 4)
	fel.InjectFault(felderatest.Fault{Kind: felderatest.FailStatus, Path: "ingress", Status: 400, Code: "InvalidRequest"})
	first.src.push(0x3010, pgoutputtest.Commit(0x3000, 0x3010, at))
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

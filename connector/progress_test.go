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
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgoutputtest"
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
		c.test.NoSkip = unsafe
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
			fc, fel := atLeastOnceDouble(t)
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

			// The second session ends without waiting for a checkpoint
			// (its hard stop passes as the test returns): after the
			// restart below none can come from its process.
			hard, hardNow := context.WithCancel(context.Background())
			defer hardNow()
			o = atLeastOnce(t, scriptOptsUnsafe(withProgress(fel), false), unsafe)
			plan = o.plan
			o.plan = func(p *setup.Plan, c *Connector) {
				plan(p, c)
				c.hardStop = hard
			}
			second := runScriptedWith(t, fc, hour, o)
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
	fc, fel := atLeastOnceDouble(t)
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
	if CauseOf(readErr) != CauseFeldera || !strings.Contains(readErr.Error(), "restarted") {
		t.Fatalf("error %v (cause %s), want Feldera's restart", readErr, CauseOf(readErr))
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
		p.Gate, p.Model, p.FaultTolerant, p.Incarnation = delivery.GateCheckpoint, feldera.FTAtLeastOnce, true, st.GlobalMetrics.IncarnationUUID
		c.gate.Store(int32(delivery.GateCheckpoint))
		c.test.NoProgressStep = unsafe
	}
	return o
}

// atLeastOnceDouble is a double under at_least_once that takes no
// checkpoint of its own, declaring the progress table.
func atLeastOnceDouble(t *testing.T) (felderatest.Config, *felderatest.Server) {
	fc := withPipeline(felderatest.Config{FaultTolerance: `{"model": "at_least_once", "checkpoint_interval_secs": null}`})
	fel, err := felderatest.NewServer(fc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fel.Close)
	return fc, fel
}

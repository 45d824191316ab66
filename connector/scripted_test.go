package connector

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/internal/pgoutputtest"
	"github.com/pgfeldera/pgfeldera/internal/waitfor"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/state"
)

// script is a replication source that sends what a test pushes, as a
// walsender would, and records every status update the loop sends.
type script struct {
	in chan []byte

	mu       sync.Mutex
	statuses []sentStatus
}

type sentStatus struct {
	write, flush pglogrepl.LSN
	reply        bool
}

func newScript() *script {
	return &script{in: make(chan []byte, 64)}
}

func (s *script) ReceiveMessage(ctx context.Context) (pgproto3.BackendMessage, error) {
	select {
	case b := <-s.in:
		return &pgproto3.CopyData{Data: b}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *script) SendStatus(write, flush, _ pglogrepl.LSN, reply bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statuses = append(s.statuses, sentStatus{write, flush, reply})
	return nil
}

// sent is every status update so far.
func (s *script) sent() []sentStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sentStatus(nil), s.statuses...)
}

// flushed is the highest flush position any status update carried.
func (s *script) flushed() pglogrepl.LSN {
	var top pglogrepl.LSN
	for _, x := range s.sent() {
		top = max(top, x.flush)
	}
	return top
}

// waitFlushed waits until a status update carries a flush position of at
// least lsn.
func (s *script) waitFlushed(t *testing.T, lsn pglogrepl.LSN) {
	t.Helper()
	s.wait(t, "flushed "+lsn.String(), func(x sentStatus) bool { return x.flush >= lsn })
}

// waitWritten waits until a status update reports WAL read up to lsn:
// the loop has handled everything the script sent before it.
func (s *script) waitWritten(t *testing.T, lsn pglogrepl.LSN) {
	t.Helper()
	s.wait(t, "read "+lsn.String(), func(x sentStatus) bool { return x.write >= lsn })
}

// waitCount waits until n status updates were sent in all.
func (s *script) waitCount(t *testing.T, n int) {
	t.Helper()
	s.waitAll(t, fmt.Sprintf("%d status updates", n), func(st []sentStatus) bool { return len(st) >= n })
}

// wait waits until a status update satisfies ok.
func (s *script) wait(t *testing.T, what string, ok func(sentStatus) bool) {
	t.Helper()
	s.waitAll(t, "a status update that says "+what, func(st []sentStatus) bool { return slices.ContainsFunc(st, ok) })
}

// waitAll waits, as long as status updates keep coming, until those sent
// so far satisfy ok.
func (s *script) waitAll(t *testing.T, what string, ok func([]sentStatus) bool) {
	t.Helper()
	count := func() int { return len(s.sent()) }
	if !waitfor.Until(10*time.Second, time.Millisecond, count, func() bool { return ok(s.sent()) }) {
		t.Fatalf("no %s; statuses: %+v", what, s.sent())
	}
}

// push sends a pgoutput message at WAL position at, the server's end
// being at too.
func (s *script) push(at pglogrepl.LSN, m []byte) {
	s.in <- pgoutputtest.XLogData(at, at, m)
}

// scripted is the session loop over a script and the Feldera double, with
// no Postgres: the loop's rules in milliseconds.
type scripted struct {
	src   *script
	fel   *felderatest.Server
	c     *Connector
	done  chan error
	stop  context.CancelFunc
	ended sync.Once
	err   error
}

// end stops the session and waits until it ended, once; it returns the
// session's error.
func (sc *scripted) end() error {
	sc.ended.Do(func() {
		sc.stop()
		sc.err = <-sc.done
	})
	return sc.err
}

const scriptStart = pglogrepl.LSN(0x1000)

var usersRel = []pgoutputtest.Col{{Name: "id", OID: pgvalue.OIDInt8, Key: true}, {Name: "name", OID: pgvalue.OIDText}}

func runScripted(t *testing.T, fc felderatest.Config, set func(*Config)) *scripted {
	t.Helper()
	return runScriptedWith(t, fc, set, scriptOpts{})
}

// scriptOpts change the session runScriptedWith starts.
type scriptOpts struct {
	inc  func(c *Connector) *incremental.Session // the session's incremental snapshot (nil: none)
	plan func(p *setup.Plan, c *Connector)       // changes the session's plan
	ddl  string                                  // more tables for the double's program
	fel  *felderatest.Server                     // the double to use (nil: a new one)
	// readErr, when set, takes the error reading the progress row, and
	// a failed read starts no session.
	readErr *error
	// stateFile, when set, is the state file beside which the session
	// opens its fence file, as a process does (openFence): what the
	// previous session recorded there is taken over.
	stateFile string
}

// runScriptedWith is runScripted with the session o describes.
func runScriptedWith(t *testing.T, fc felderatest.Config, set func(*Config), o scriptOpts) *scripted {
	t.Helper()
	fc.Pipeline = "p"
	fc.Tables = felderatest.MustParseDDL(`CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR);` + o.ddl)
	fel := o.fel
	if fel == nil {
		var err error
		if fel, err = felderatest.NewServer(fc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(fel.Close)
	}
	client, err := feldera.New(feldera.Config{URL: fel.URL, Pipeline: "p"})
	if err != nil {
		t.Fatal(err)
	}
	tables, _ := catalog.ParseTables("users")
	cfg := Config{
		// Nothing listens there: the stop's confirmation on a second
		// connection fails at once, and is only logged.
		DSN: "postgres://pgfeldera@127.0.0.1:1/none?connect_timeout=1", Publication: "pub", Slot: "s", Tables: tables,
		StopTimeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if set != nil {
		set(&cfg)
	}
	cfg.StateFile = o.stateFile
	c, err := New(cfg, client)
	if err != nil {
		t.Fatal(err)
	}
	if o.stateFile != "" {
		if err := c.openFence(); err != nil {
			t.Fatal(err)
		}
	}
	target := &decode.Target{Schema: "public", Name: "users", Route: 0, Dest: fc.Tables[0]}
	p := &setup.Plan{Mapping: catalog.Mapping{Targets: []*decode.Target{target}, Routes: []*decode.Target{target}, Groups: [][]int{{0}}},
		Gate: delivery.GateComplete, Model: feldera.FTNone, WALTimeout: time.Minute}
	c.acked, c.srv.WALEnd = scriptStart, scriptStart
	ctx, stop := context.WithCancel(context.Background())
	// STOP_TIMEOUT after the stop begins, what is unfinished is abandoned,
	// as Run arms it (armStop): a graceful stop that waits for a
	// checkpoint a restarted double never takes ends.
	hard, abandon := context.WithCancel(context.Background())
	c.hardStop = hard
	context.AfterFunc(ctx, func() { time.AfterFunc(cfg.StopTimeout, abandon) })
	t.Cleanup(abandon)
	if o.plan != nil {
		o.plan(p, c)
	}
	src := newScript()
	sc := &scripted{src: src, fel: fel, c: c, done: make(chan error, 1), stop: stop}
	var is *incremental.Session
	if o.inc != nil {
		is = o.inc(c)
	}
	c.txns.Incarnation = fel.Incarnation() // the session's (Connector.session)
	progress := c.setProgress(p)
	if err := c.countPast(p, progress); err != nil {
		t.Fatal(err)
	}
	if err := c.txns.Settle(ctx, c.joinTables(p, progress)); err != nil {
		t.Fatal(err)
	}
	c.out.Rejoin = c.joinTables(p, progress) != nil // as the session sets it while it streams
	skip, err := c.readProgress(ctx, p)
	switch {
	case o.readErr != nil && err != nil:
		*o.readErr = err
		stop()
		return nil
	case err != nil:
		t.Fatal(err)
	}
	s := c.newStream(p, src, is)
	if err := s.skipBelow(skip); err != nil {
		t.Fatal(err)
	}
	go func() { sc.done <- s.serve(ctx) }()
	t.Cleanup(func() { sc.end() })
	src.push(scriptStart, pgoutputtest.Relation(10, "public", "users", 'd', usersRel...))
	return sc
}

// transaction pushes one source transaction of inserts committed at
// commit (its record ending at end).
func (sc *scripted) transaction(commit, end pglogrepl.LSN, ids ...string) {
	at := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	sc.src.push(commit, pgoutputtest.Begin(commit, at, 700))
	for _, id := range ids {
		sc.src.push(commit, pgoutputtest.Insert(10, id, "n"+id))
	}
	sc.src.push(end, pgoutputtest.Commit(commit, end, at))
}

// A quiet keepalive releases the WAL below the server's end: an idle slot
// retains nothing.
func TestScripted_IdleKeepaliveReleasesWAL(t *testing.T) {
	sc := runScripted(t, felderatest.Config{}, nil)
	sc.src.in <- pgoutputtest.Keepalive(0x5000, false)
	sc.src.waitFlushed(t, 0x5000)
}

// Nothing of a transaction is acknowledged before Feldera completes its
// batch, not even at a keepalive that asks for a reply; once complete,
// its COMMIT is, and the next quiet keepalive releases the rest.
func TestScripted_CommitAcknowledgedAtCompletion(t *testing.T) {
	sc := runScripted(t, felderatest.Config{}, nil)
	sc.fel.HoldCompletion(true)
	sc.transaction(0x6000, 0x6010, "1", "2")
	sc.src.in <- pgoutputtest.Keepalive(0x7000, true)
	sc.src.waitWritten(t, 0x6010)      // the reply: the transaction was handled
	time.Sleep(200 * time.Millisecond) // completion polls meanwhile
	if got := sc.src.flushed(); got > scriptStart {
		t.Fatalf("flushed %s before Feldera completed the batch", got)
	}
	sc.fel.HoldCompletion(false)
	sc.src.waitFlushed(t, 0x6010)
	if n := sc.fel.Len("users"); n != 2 {
		t.Fatalf("Feldera holds %d rows, want 2", n)
	}
	if got := sc.src.flushed(); got > 0x6010 {
		t.Fatalf("flushed %s: past the COMMIT, while the keepalive came with the batch in flight", got)
	}
	sc.src.in <- pgoutputtest.Keepalive(0x7000, false)
	sc.src.waitFlushed(t, 0x7000)
}

// A transaction with no mapped rows (its changes are to unpublished
// tables) needs nothing from Feldera: its COMMIT is acknowledged at once
// when nothing was sent before it, and only after what was sent before it
// completed otherwise.
func TestScripted_CommitWithNothingBuffered(t *testing.T) {
	sc := runScripted(t, felderatest.Config{}, nil)
	sc.transaction(0x2000, 0x2010)
	sc.src.waitFlushed(t, 0x2010)

	sc.fel.HoldCompletion(true)
	sc.transaction(0x3000, 0x3010, "1")
	sc.transaction(0x4000, 0x4010) // nothing of it buffered
	sc.src.in <- pgoutputtest.Keepalive(0x4010, true)
	sc.src.waitWritten(t, 0x4010)
	if got := sc.src.flushed(); got > 0x2010 {
		t.Fatalf("flushed %s while the batch before the empty COMMIT is not complete", got)
	}
	sc.fel.HoldCompletion(false)
	sc.src.waitFlushed(t, 0x4010)
}

// A graceful stop sends what is buffered, waits for it to complete, and
// sends a last status update that acknowledges it: the rows of a batch
// still lingering are not left for a replay.
func TestScripted_StopFlushesAndAcknowledges(t *testing.T) {
	sc := runScripted(t, felderatest.Config{}, func(c *Config) { c.BatchLinger = time.Hour })
	sc.transaction(0x6000, 0x6010, "1")
	sc.src.in <- pgoutputtest.Keepalive(0x6010, true)
	sc.src.waitWritten(t, 0x6010)
	if got := sc.src.flushed(); got > scriptStart || sc.fel.Len("users") != 0 {
		t.Fatalf("flushed %s, Feldera holds %d rows: the batch was to linger", got, sc.fel.Len("users"))
	}
	sc.stop()
	if err := <-sc.done; err != nil {
		t.Fatalf("stop: %v", err)
	}
	sc.done <- nil // for the cleanup
	st := sc.src.sent()
	if last := st[len(st)-1]; last.flush != 0x6010 || sc.fel.Len("users") != 1 {
		t.Fatalf("last status %+v and %d rows in Feldera, want flush 0/6010 and 1", last, sc.fel.Len("users"))
	}
}

// A TRUNCATE discards the rows of the table still buffered (the source
// discarded them too), retracts every row Feldera holds, and is
// acknowledged at its COMMIT, with the COMMIT before it whose rows it
// discarded.
func TestScripted_TruncateDiscardsAndRetracts(t *testing.T) {
	// Two rows fill a batch, which the next change seals; the third
	// lingers.
	sc := runScripted(t, felderatest.Config{}, func(c *Config) { c.BatchLinger, c.BatchMaxRows = time.Hour, 2 })
	sc.transaction(0x2000, 0x2010, "1", "2")
	sc.transaction(0x3000, 0x3010, "3")
	sc.src.waitFlushed(t, 0x2010)
	if n := sc.fel.Len("users"); n != 2 {
		t.Fatalf("Feldera holds %d rows before the TRUNCATE, want 2", n)
	}
	at := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	sc.src.push(0x4000, pgoutputtest.Begin(0x4000, at, 701))
	sc.src.push(0x4000, pgoutputtest.Truncate(false, 10))
	sc.src.push(0x4010, pgoutputtest.Commit(0x4000, 0x4010, at))
	sc.src.waitFlushed(t, 0x4010)
	if n := sc.fel.Len("users"); n != 0 {
		t.Fatalf("Feldera holds %d rows after the TRUNCATE, want none: %v", n, sc.fel.Rows("users"))
	}
	if got := sc.fel.InsertsByKey("users")["3"]; got != 0 {
		t.Fatalf("row 3, buffered before the TRUNCATE, was sent %d times", got)
	}
}

// Under the checkpoint gate (at_least_once), a TRUNCATE's retraction
// holds the position at its COMMIT until a checkpoint covers the step
// that completed it. The retraction is no batch of the frontier: its
// steps reach the gate only through the ledger's step watermark, and a
// COMMIT acknowledged before a checkpoint covers them would let a Feldera
// restart restore the rows the TRUNCATE removed, with the slot past it.
func TestScripted_TruncateWaitsForACheckpointCoveringItsRetraction(t *testing.T) {
	fc := felderatest.Config{FaultTolerance: `{"model": "at_least_once", "checkpoint_interval_secs": null}`}
	sc := runScriptedWith(t, fc, func(c *Config) { c.CheckpointAfter = time.Hour }, atLeastOnce(t, scriptOpts{}, false))
	sc.transaction(0x2000, 0x2010, "1", "2")
	waitRows(t, sc.fel, 2)
	if err := sc.fel.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	sc.src.waitFlushed(t, 0x2010)

	at := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	sc.src.push(0x4000, pgoutputtest.Begin(0x4000, at, 701))
	sc.src.push(0x4000, pgoutputtest.Truncate(false, 10))
	sc.src.push(0x4010, pgoutputtest.Commit(0x4000, 0x4010, at))
	sc.src.in <- pgoutputtest.Keepalive(0x4010, true) // the answer says the loop read the COMMIT
	sc.src.waitWritten(t, 0x4010)
	if n := sc.fel.Len("users"); n != 0 {
		t.Fatalf("Feldera holds %d rows after the TRUNCATE, want none", n)
	}
	if got := sc.src.flushed(); got >= 0x4010 {
		t.Fatalf("the TRUNCATE's COMMIT was acknowledged (flush %s) before a checkpoint covered its retraction", got)
	}
	if err := sc.fel.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	sc.src.waitFlushed(t, 0x4010)
}

// waitRows waits until Feldera's table users holds n rows.
func waitRows(t *testing.T, fel *felderatest.Server, n int) {
	t.Helper()
	if !waitfor.Until(10*time.Second, time.Millisecond, func() int { return fel.Len("users") }, func() bool { return fel.Len("users") == n }) {
		t.Fatalf("Feldera holds %d rows of users, want %d", fel.Len("users"), n)
	}
}

// The linger sends a committed transaction's rows once it passes, with no
// further message from the server; it never seals a batch that holds rows
// of the transaction still open, which waits for its COMMIT.
func TestScripted_LingerWaitsForTheCommit(t *testing.T) {
	sc := runScripted(t, felderatest.Config{}, func(c *Config) { c.BatchLinger = 20 * time.Millisecond })
	sc.transaction(0x2000, 0x2010, "1")
	sc.src.waitFlushed(t, 0x2010) // sent by the linger alone
	at := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	sc.src.push(0x3000, pgoutputtest.Begin(0x3000, at, 702))
	sc.src.push(0x3000, pgoutputtest.Insert(10, "2", "n2"))
	sc.src.in <- pgoutputtest.Keepalive(0x3000, true)
	sc.src.waitWritten(t, 0x3000)
	for i := 0; i < 10; i++ { // ten lingers, each ended by a keepalive that wakes the loop
		time.Sleep(20 * time.Millisecond)
		sc.src.in <- pgoutputtest.Keepalive(0x3000, false)
	}
	before := sc.src.sent()
	sc.src.in <- pgoutputtest.Keepalive(0x3000, true) // its reply: the loop handled the ten
	sc.src.waitCount(t, len(before)+1)
	if got := sc.fel.InsertsByKey("users")["2"]; got != 0 {
		t.Fatalf("a row of the open transaction was sent before its COMMIT (%d times)", got)
	}
	sc.src.push(0x3010, pgoutputtest.Commit(0x3000, 0x3010, at))
	sc.src.waitFlushed(t, 0x3010)
	if n := sc.fel.Len("users"); n != 2 {
		t.Fatalf("Feldera holds %d rows, want 2", n)
	}
}

// A chunk handed and waiting for its high watermark makes the idle loop
// send a status update (a nudge that wakes a walsender asleep before the
// watermark's flush) every incremental.WatermarkNudge; without it the
// loop sends none before the status interval, which the plan's
// wal_sender_timeout makes 10 s here.
func TestScripted_WatermarkNudges(t *testing.T) {
	start := time.Now()
	sc := runScriptedWith(t, felderatest.Config{}, nil, scriptOpts{inc: func(c *Connector) *incremental.Session {
		cfg := incremental.Config{ChunkRows: 10, Parallelism: 1, Logger: c.logger,
			Progress: func(int) *incremental.Progress { return &incremental.Progress{} }}
		inc := incremental.NewSession(cfg, &state.State{}, &catalog.Mapping{})
		inc.Handoff().Hand(&incremental.Chunk{Seq: 1})
		return inc
	}})
	sc.src.waitCount(t, 3)
	// Three nudges take 1.5 s; the first regular status would come at 10 s.
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("3 status updates took %s: the loop did not nudge every %s", took, incremental.WatermarkNudge)
	}
}

// A graceful stop inside a source transaction whose rows already went
// out in part reads on to its COMMIT and commits it whole: no state of
// Feldera's shows part of it, none is left open, and the last status
// acknowledges it.
func TestScripted_StopFinishesTheSourceTransaction(t *testing.T) {
	var partial atomic.Int64
	fc := felderatest.Config{OnState: func(v felderatest.View) {
		if n := v.Len("users"); n != 0 && n != 6 {
			partial.Add(1)
		}
	}}
	sc := runScripted(t, fc, func(c *Config) { c.BatchMaxRows, c.BatchLinger = 2, time.Hour })
	at := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	sc.src.push(0x6000, pgoutputtest.Begin(0x6000, at, 700))
	for _, id := range []string{"1", "2", "3", "4"} {
		sc.src.push(0x6000, pgoutputtest.Insert(10, id, "n"+id))
	}
	// The third change sealed the first two into a Feldera transaction.
	deadline := time.Now().Add(time.Minute)
	for sc.fel.OpenTransaction() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if sc.fel.OpenTransaction() == 0 {
		t.Fatal("no Feldera transaction opened for the first batch")
	}
	sc.stop()
	for _, id := range []string{"5", "6"} {
		sc.src.push(0x6000, pgoutputtest.Insert(10, id, "n"+id))
	}
	sc.src.push(0x6010, pgoutputtest.Commit(0x6000, 0x6010, at))
	if err := <-sc.done; err != nil {
		t.Fatalf("stop: %v", err)
	}
	sc.done <- nil // for the cleanup
	st := sc.src.sent()
	if n, last := sc.fel.Len("users"), st[len(st)-1]; n != 6 || partial.Load() != 0 || last.flush != 0x6010 {
		t.Fatalf("after the stop: %d rows, %d states with part of the transaction, last status %+v; want 6, 0, flush 0/6010", n, partial.Load(), last)
	}
	if id := sc.fel.OpenTransaction(); id != 0 {
		t.Fatalf("Feldera transaction %d left open", id)
	}
}

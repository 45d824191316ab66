package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/delivery/internal/txnview"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/state"
)

// Feldera runs every ordinary step as an automatic transaction of its own
// (controller.rs, advance_transaction_state), so /stats names a running
// transaction that is not ours most of the time; ours is read from the
// initiators, who wanted it (txnview.Of).
//
// The protocol (Transactions), on the poster (one request at a time, in source order):
//  1. POST /start_transaction, retried with backoff while another client
//     holds the API's transaction (409: a second pgfeldera on the same
//     pipeline). A transaction an input connector started is joined. It
//     starts at the next step input triggers, after any commit that runs.
//  2. The ingress POSTs, as usual; their tokens complete only after the
//     commit.
//  3. Before the commit, wait until Feldera has fed every record of ours
//     to a step of the transaction (/stats: it runs under our ID and our
//     ingress endpoints buffer nothing). Feldera feeds no input while a
//     commit runs, and a commit asked before the transaction's first step
//     drops the transaction, so records still buffered at the commit
//     would land after it, outside, over several steps.
//  4. POST /commit_transaction, then wait until /stats names it no more:
//     the commit finished. A commit takes as long as the views need, so
//     this wait is bounded by progress (FELDERA_COMMIT_STALL_TIMEOUT), not
//     by a fixed time.
//
// There is no abort: every path commits, errors included (the slot replays
// what follows, and primary keys absorb the replay). The fence file
// records the open transaction, so a process that crashed with one open
// has it committed by the next one, or, when its commit still runs,
// waits for it before sending anything.

// Feldera buffers at most this many records (and bytes) per HTTP ingress
// endpoint; past it, a POST stops being read until a step drains the
// buffer (DURABILITY.md §4), and one blocked 30 s (a long checkpoint, a
// stalled step) is answered 503 by the manager: fenced and replayed. So
// batches in flight never add up to more than that (a single larger batch
// still goes, alone), and POSTs never meet Feldera's backpressure.
const (
	QueueRecords = 100_000
	QueueBytes   = 100_000_000
)

// TxnAPI is what Feldera transactions need of the pipeline.
// *feldera.Client satisfies it.
type TxnAPI interface {
	StartTransaction(ctx context.Context) (int64, error)
	CommitTransaction(ctx context.Context) error
	Stats(ctx context.Context) (*feldera.Stats, error)
}

// Transactions runs the protocol above for one connector: it holds the
// Feldera transaction open, if any. It is touched by one goroutine at a
// time: the poster of the batch in progress, or the session between
// posters; Clock alone is read by others (the completer).
type Transactions struct {
	API      TxnAPI
	Fence    *Fence
	Clock    TxnClock
	Observer Observer
	Logger   *slog.Logger
	// CompletionTimeout bounds a start under contention and the wait for
	// a transaction to take its input; CommitStallTimeout a commit that
	// shows no progress.
	CompletionTimeout, CommitStallTimeout time.Duration
	// Started counts transactions started, Conflicts the 409 answers,
	// Partial the transactions committed holding part of a source
	// transaction (NotePart).
	Started, Conflicts, Partial *atomic.Int64
	// Incarnation is the pipeline process the session feeds.
	Incarnation string
	// Accepted is FELDERA_ACK_MODE=accepted (unsafe, kept to show the
	// loss the other modes prevent): a commit is done at the HTTP 200 of
	// commit_transaction, as every other request is at its answer; the
	// next start_transaction waits for the commit itself (409).
	Accepted bool
	// Counted is, per session, the tables whose records in the stream's
	// transactions are a function of the WAL alone, which are counted
	// past the progress row (txncount.go); nil: none.
	Counted map[string]bool
	cur     *openTxn // nil: none
	win     *window  // what Feldera holds past the progress row (txncount.go)
	pending bool     // win came from before this session: Posting reads what Feldera holds of it
	skip    Skip     // the replay's records Feldera holds already
}

// LeftOpen takes over the transaction a previous process left open, by
// its id and the pipeline process it was opened in: Settle deals with it.
func (x *Transactions) LeftOpen(left state.OpenTransaction) {
	x.cur = &openTxn{id: left.ID, incarnation: left.Incarnation, whole: left.Whole, since: left.Since, through: pglogrepl.LSN(left.Through)}
}

// record is the fence file's record of the held transaction.
func (t *openTxn) record() *state.OpenTransaction {
	return &state.OpenTransaction{ID: t.id, Incarnation: t.incarnation, Since: t.since, Whole: t.whole, Through: uint64(t.through)}
}

// Whole records, in the fence file too, that every POST of the held
// transaction was answered and taken, the progress row last: it holds
// whole source transactions up to its row. A process that dies before
// the commit leaves one that the next commits (Settle) instead of
// joining: nothing of it is sent again.
func (x *Transactions) Whole() error {
	t := x.cur
	t.whole = true
	return x.Fence.Transaction(t.record())
}

// Through records, before a POST into the held transaction, the bound of
// the WAL positions of the changes it carries (Batch.Through), in the
// fence file too: a process that starts after a failover checks the fork
// against it before it joins the transaction or commits it.
func (x *Transactions) Through(lsn pglogrepl.LSN) error {
	t := x.cur
	if t == nil || lsn <= t.through {
		return nil
	}
	t.through = lsn
	return x.Fence.Transaction(t.record())
}

// LeftThrough is the bound of what a transaction a previous process left
// open may hold (0: none recorded).
func (x *Transactions) LeftThrough() pglogrepl.LSN {
	if x.cur == nil {
		return 0
	}
	return x.cur.through
}

// Held reports whether a transaction is held open.
func (x *Transactions) Held() bool { return x.cur != nil }

// ID is the held transaction's id (0: none, or not yet known).
func (x *Transactions) ID() int64 {
	if x.cur == nil {
		return 0
	}
	return x.cur.id
}

// Mark is what the held transaction's batches in flight share: when it
// committed.
func (x *Transactions) Mark() *TxnMark { return x.cur.mark }

// Posted records a POST to table while a transaction is held (none:
// nothing to record): the waits watch its buffer.
func (x *Transactions) Posted(table string) {
	if t := x.cur; t != nil && t.tables != nil {
		t.tables[table] = true
		t.posted = true
	}
}

// Empty reports whether nothing was POSTed in the held transaction (nor
// joined with what a crash left in it): it has not started in Feldera,
// which starts a transaction at the next step input triggers.
func (x *Transactions) Empty() bool {
	return x.cur == nil || len(x.cur.tables) == 0
}

// Buffered records a batch of rows and bytes POSTed inside the held
// transaction: Room bounds what Feldera still buffers of it.
func (x *Transactions) Buffered(rows, bytes int) {
	x.cur.unfedRows += rows
	x.cur.unfedBytes += bytes
}

// openTxn is the Feldera transaction held open.
type openTxn struct {
	id          int64
	incarnation string
	tables      map[string]bool // canonical tables POSTed to in it
	mark        *TxnMark        // shared with its batches in flight: when it committed
	// unfedRows and unfedBytes bound from above what Feldera still
	// buffers of ours, not yet fed to a step (see Room).
	unfedRows, unfedBytes int
	joined                bool // said once: an input connector holds it too
	whole                 bool // its POSTs all answered, the progress row last (Whole)
	since                 time.Time
	rejoined              bool          // left open by a crash or a failure, and joined (Settle)
	posted                bool          // this process POSTed into it
	through               pglogrepl.LSN // Through: what its changes' positions end by
}

// txnBackoffMax bounds the wait between start_transaction attempts under
// contention: short, so a second connector gets in between the first's
// transactions.
const txnBackoffMax = 100 * time.Millisecond

// Begin starts a Feldera transaction, waiting while another client
// holds one, up to FELDERA_COMPLETION_TIMEOUT.
func (x *Transactions) Begin(ctx context.Context) error {
	start := time.Now()
	wait := 2 * time.Millisecond
	warned := false
	// Recorded before the request: a crash after Feldera opened it and
	// before its answer still leaves a trace.
	if err := x.Fence.Transaction(&state.OpenTransaction{Incarnation: x.Incarnation, Since: start}); err != nil {
		return err
	}
	for {
		id, err := x.API.StartTransaction(ctx)
		if err == nil {
			x.cur = &openTxn{id: id, incarnation: x.Incarnation, tables: map[string]bool{}, mark: &TxnMark{}, since: start}
			x.Clock.Opened()
			if err := x.Fence.Transaction(x.cur.record()); err != nil {
				return err // a transaction is held: the caller commits it on the way out
			}
			x.Started.Add(1)
			if waited := time.Since(start); waited > time.Second {
				x.Logger.Info("flush: got Feldera's transaction after waiting for another client's", "transaction_id", id, "waited", waited.Round(time.Millisecond))
			}
			crashtest.PointIn(ctx, "after_begin")
			return nil
		}
		if code := feldera.ErrorCode(err); code != "" {
			x.Observer.FelderaError(code)
		}
		if !feldera.IsTransactionInProgress(err) {
			x.clearRecord()
			// An unclear answer may have opened one: the next session
			// looks at /stats (Settle).
			if feldera.IsOutcomeUnknown(err) {
				x.cur = &openTxn{incarnation: x.Incarnation, tables: map[string]bool{}} // ID unknown
			}
			return fmt.Errorf("start a Feldera transaction: %w", err)
		}
		x.Conflicts.Add(1)
		waited := time.Since(start)
		if waited >= x.CompletionTimeout {
			x.clearRecord()
			return fmt.Errorf("%w: another client has held the pipeline's transaction%s for %s (409 TransactionInProgress to POST /start_transaction; FELDERA_COMPLETION_TIMEOUT): nothing acknowledged; "+
				"if no other client posts to this pipeline, it is one whose record the fence file lost: it stays open until Feldera restarts", ErrFelderaUnavailable, x.heldBy(ctx), waited.Round(time.Millisecond))
		}
		if !warned && waited >= CompletionLogAfter {
			warned = true
			x.Logger.Warn("flush: another client holds Feldera's transaction"+x.heldBy(ctx)+" (409 TransactionInProgress); retrying. Another pgfeldera on this pipeline?", "waited", waited.Round(time.Millisecond))
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			x.clearRecord()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, txnBackoffMax)
	}
}

// heldBy names the transaction the API holds, as /stats shows it ("" when
// it cannot tell).
func (x *Transactions) heldBy(ctx context.Context) string {
	st, err := x.API.Stats(ctx)
	if err != nil {
		return ""
	}
	in := st.GlobalMetrics.TransactionInitiators
	if in == nil || in.TransactionID == nil {
		return ""
	}
	return fmt.Sprintf(" (transaction %d, incarnation %s)", *in.TransactionID, st.GlobalMetrics.IncarnationUUID)
}

func (x *Transactions) clearRecord() {
	if err := x.Fence.Transaction(nil); err != nil {
		x.Logger.Warn("fence: could not clear the open-transaction mark", "err", err)
	}
}

// Absorbed waits until the transaction has taken every record POSTed in
// it: it runs under our ID and our ingress endpoints buffer nothing. It
// waits while the transaction is pending behind another's commit (an
// automatic step's, most of the time), and fails only when nothing names
// it any more.
func (x *Transactions) Absorbed(ctx context.Context) error {
	t := x.cur
	return x.pollStats(ctx, fmt.Sprintf("wait for Feldera transaction %d to take its input", t.id), t.tables, x.CompletionTimeout, func(st *feldera.Stats) (bool, error) {
		g := st.GlobalMetrics
		x.noteJoined(st)
		if t.incarnation == "" {
			t.incarnation = g.IncarnationUUID
		}
		switch v := txnview.Of(g, t.id, t.incarnation); v {
		case txnview.Restarted:
			if txnview.OpenedAfterRestart(g, t.id) {
				// Opened in the new process: the next session finds it
				// there (Settle), and joins or commits it.
				old := t.incarnation
				t.incarnation = g.IncarnationUUID
				return false, fmt.Errorf("feldera pipeline restarted (incarnation %s → %s) before transaction %d was opened, which holds what was posted since; replaying from the slot", old, g.IncarnationUUID, t.id)
			}
			return false, fmt.Errorf("feldera pipeline restarted (incarnation %s → %s) while transaction %d was open: it dropped it; replaying from the slot", t.incarnation, g.IncarnationUUID, t.id)
		case txnview.Gone, txnview.Committing:
			return false, fmt.Errorf("feldera transaction %d is %s before pgfeldera committed it (/stats transaction_id %d, %s): another client committed it; replaying from the slot", t.id, v, g.TransactionID, g.TransactionStatus)
		case txnview.Taking:
			if st.IngressBuffered(t.tables) == 0 {
				t.unfedRows, t.unfedBytes = 0, 0
				x.checkTaken(st)
				return true, nil
			}
		case txnview.Pending:
			// Input starts a transaction, and ours buffers nothing: it
			// holds no record (one this process joined, whose every
			// batch the replay skipped), so it has nothing to take, and
			// its commit drops it.
			if !t.posted && st.IngressBuffered(t.tables) == 0 {
				return true, nil
			}
		}
		return false, nil
	}, func(st *feldera.Stats) error {
		return fmt.Errorf("%w: transaction %d has not taken its input, and Feldera showed no progress for %s (FELDERA_COMPLETION_TIMEOUT; /stats %s, %d records buffered): nothing acknowledged", ErrFelderaUnavailable, t.id, x.CompletionTimeout, st.GlobalMetrics.TransactionStatus, st.IngressBuffered(t.tables))
	})
}

// pollStats reads /stats on txnview.Poll's schedule until done reports true or
// an error. It gives up once Feldera showed no progress (txnview.Mark)
// for stall; timeout makes the error from the last answer.
func (x *Transactions) pollStats(ctx context.Context, what string, tables map[string]bool, stall time.Duration, done func(*feldera.Stats) (bool, error), timeout func(*feldera.Stats) error) error {
	var last txnview.Mark
	moved := time.Now()
	for n := 0; ; n++ {
		st, err := x.API.Stats(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok, err := done(st); ok || err != nil {
			return err
		}
		if m := txnview.MarkOf(st, tables); n == 0 || m != last {
			last, moved = m, time.Now()
		} else if time.Since(moved) >= stall {
			return timeout(st)
		}
		if err := sleepCtx(ctx, txnview.Poll(n)); err != nil {
			return err
		}
	}
}

// Room waits, before a POST inside a Feldera transaction, until
// Feldera's ingress buffer has room for a batch of rows and bytes: the transaction's batches
// complete only at its commit, so the in-flight bound on completions does
// not apply to them, but their records leave the buffer as the
// transaction's steps take them, and the buffer bound (QueueRecords,
// QueueBytes) still holds on what is left there.
func (x *Transactions) Room(ctx context.Context, rows, bytes int) error {
	t := x.cur
	if t.unfedRows+rows <= QueueRecords && t.unfedBytes+bytes <= QueueBytes {
		return nil
	}
	return x.pollStats(ctx, fmt.Sprintf("wait for Feldera transaction %d to take its input", t.id), t.tables, x.CompletionTimeout, func(st *feldera.Stats) (bool, error) {
		held, heldBytes := st.IngressBufferedAll(t.tables)
		t.unfedRows, t.unfedBytes = int(held), int(heldBytes)
		return held == 0 || t.unfedRows+rows <= QueueRecords && t.unfedBytes+bytes <= QueueBytes, nil
	}, func(st *feldera.Stats) error {
		return fmt.Errorf("%w: transaction %d has not taken its input, and Feldera showed no progress for %s (FELDERA_COMPLETION_TIMEOUT; %d records buffered): nothing acknowledged", ErrFelderaUnavailable, t.id, x.CompletionTimeout, t.unfedRows)
	})
}

// noteJoined says once per transaction that input connectors hold it too.
func (x *Transactions) noteJoined(st *feldera.Stats) {
	t := x.cur
	in := st.GlobalMetrics.TransactionInitiators
	if t == nil || t.joined || in == nil || len(in.InitiatedByConnectors) == 0 || in.TransactionID == nil || *in.TransactionID != t.id {
		return
	}
	t.joined = true
	names := make([]string, 0, len(in.InitiatedByConnectors))
	for n := range in.InitiatedByConnectors {
		names = append(names, n)
	}
	x.Logger.Info("flush: joined a Feldera transaction that input connectors started; its commit waits for them too", "transaction_id", t.id, "connectors", strings.Join(names, ","))
}

// Commit commits the transaction and waits until the commit finished.
func (x *Transactions) Commit(ctx context.Context) error {
	t := x.cur
	crashtest.PointIn(ctx, "before_commit")
	err := x.API.CommitTransaction(ctx)
	switch {
	case feldera.IsNoTransactionInProgress(err):
		// Committed by someone else or dropped by a restart: which one,
		// /stats says below.
		x.Logger.Warn("flush: Feldera has no open API transaction to commit (400 NoTransactionInProgress)", "transaction_id", t.id)
	case err != nil:
		if code := feldera.ErrorCode(err); code != "" {
			x.Observer.FelderaError(code)
		}
		return fmt.Errorf("commit Feldera transaction %d: %w", t.id, err)
	}
	if x.Accepted {
		x.done()
		return nil
	}
	return x.awaitCommit(ctx)
}

// awaitCommit waits until nothing names the transaction any more: its
// commit finished. A commit takes as long as the views need (minutes on
// a heavy pipeline), so the wait ends only when Feldera showed no
// progress for FELDERA_COMMIT_STALL_TIMEOUT.
func (x *Transactions) awaitCommit(ctx context.Context) error {
	t := x.cur
	logged := time.Now()
	return x.pollStats(ctx, fmt.Sprintf("wait for the commit of Feldera transaction %d", t.id), t.tables, x.CommitStallTimeout, func(st *feldera.Stats) (bool, error) {
		g := st.GlobalMetrics
		switch txnview.Of(g, t.id, t.incarnation) {
		case txnview.Restarted:
			x.done()
			return false, fmt.Errorf("feldera pipeline restarted (incarnation %s → %s) during the commit of transaction %d: replaying from the slot", t.incarnation, g.IncarnationUUID, t.id)
		case txnview.Gone:
			if t.mark != nil {
				t.mark.Committed(time.Now(), g.TotalInitiatedSteps)
			}
			x.done()
			return true, nil
		}
		if time.Since(logged) >= CompletionLogAfter*6 {
			logged = time.Now()
			x.Logger.Info("flush: a Feldera transaction is still committing", "transaction_id", t.id, "status", g.TransactionStatus, "commit_progress", string(g.CommitProgress))
		}
		return false, nil
	}, func(st *feldera.Stats) error {
		// Asked, and committed by the API's side: the next session waits
		// for it, or finds it gone, before it sends anything.
		return fmt.Errorf("%w: the commit of transaction %d showed no progress for %s (FELDERA_COMMIT_STALL_TIMEOUT; /stats %s%s): nothing acknowledged", ErrFelderaUnavailable, t.id, x.CommitStallTimeout, st.GlobalMetrics.TransactionStatus, txnview.WaitingFor(st))
	})
}

// done forgets the transaction: it committed, or is gone.
func (x *Transactions) done() {
	x.cur = nil
	x.Clock.Ended(time.Now())
	x.clearRecord()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

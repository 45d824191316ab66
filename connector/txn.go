package connector

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/state"
)

// Feldera transactions (FELDERA_TRANSACTIONS; DURABILITY.md §1). Feldera
// feeds a request body to its steps as it arrives, in chunks, and a step
// takes at most a per-endpoint cap of records: one POST can land over
// several steps, and a view can see a prefix of it. A source transaction
// with more than one record is atomic in Feldera only inside a Feldera
// transaction: everything fed between start_transaction and the commit
// becomes visible at once, at the commit.
//
// A flush is wrapped (auto) when it holds more than one table, a source
// transaction with more than one record, or part of a source transaction
// that goes on in the next flush (a transaction larger than the batch
// bound, or cut by the linger deadline): the Feldera transaction then
// stays open across the flushes until the one that ends at a source
// COMMIT. A flush of single-record transactions of one table needs none:
// a record is never split, and any prefix of them is a state the source
// had.
//
// Feldera runs every ordinary step as an automatic transaction of its own
// (controller.rs, advance_transaction_state), so /stats names a running
// transaction that is not ours most of the time; ours is read from the
// initiators, who wanted it (txnView).
//
// The protocol, on the poster (one request at a time, in source order):
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

// FELDERA_TRANSACTIONS values.
const (
	TxnAuto   = "auto"
	TxnAlways = "always"
	TxnOff    = "off"
)

// felderaTxn is the Feldera transaction this connector holds open. It is
// touched by one goroutine at a time: the poster of the batch in progress,
// or the session between posters.
type felderaTxn struct {
	id          int64
	incarnation string
	tables      map[string]bool   // canonical tables POSTed to in it
	mark        *delivery.TxnMark // shared with its batches in flight: when it committed
	// unfedRows and unfedBytes bound from above what Feldera still
	// buffers of ours, not yet fed to a step (see txnRoom).
	unfedRows, unfedBytes int
	joined                bool // said once: an input connector holds it too
}

// txnPlan is what a batch does about Feldera transactions.
type txnPlan struct {
	begin bool // start one before its POSTs
	in    bool // its POSTs go into one
	end   bool // commit it after its POSTs
}

// planTxn decides the plan of a batch sealed now: open tells whether a
// Feldera transaction continues from the previous batch, spans whether the
// batch ends inside a source transaction, multi whether it holds a source
// transaction with more than one record.
func planTxn(mode string, open, spans, multi bool, tables int) txnPlan {
	var wrap bool
	switch mode {
	case TxnOff:
		return txnPlan{}
	case TxnAlways:
		wrap = true
	default:
		wrap = open || spans || multi || tables > 1
	}
	if !wrap {
		return txnPlan{}
	}
	return txnPlan{begin: !open, in: true, end: !spans}
}

// txnBackoffMax bounds the wait between start_transaction attempts under
// contention: short, so a second connector gets in between the first's
// transactions.
const txnBackoffMax = 100 * time.Millisecond

// beginTxn starts a Feldera transaction, waiting while another client
// holds one, up to FELDERA_COMPLETION_TIMEOUT.
func (c *Connector) beginTxn(ctx context.Context) error {
	start := time.Now()
	wait := 2 * time.Millisecond
	warned := false
	// Recorded before the request: a crash after Feldera opened it and
	// before its answer still leaves a trace.
	if err := c.fence.Transaction(&state.OpenTransaction{Incarnation: c.incarnation, Since: start}); err != nil {
		return err
	}
	for {
		id, err := c.sink.StartTransaction(ctx)
		if err == nil {
			c.txn = &felderaTxn{id: id, incarnation: c.incarnation, tables: map[string]bool{}, mark: &delivery.TxnMark{}}
			c.txnClock.Opened()
			if err := c.fence.Transaction(&state.OpenTransaction{ID: id, Incarnation: c.incarnation, Since: start}); err != nil {
				return err // c.txn is set: the caller commits it on the way out
			}
			c.stats.Transactions.Add(1)
			if waited := time.Since(start); waited > time.Second {
				c.logger.Info("flush: got Feldera's transaction after waiting for another client's", "transaction_id", id, "waited", waited.Round(time.Millisecond))
			}
			crashtest.Point("after_begin")
			return nil
		}
		if code := feldera.ErrorCode(err); code != "" {
			c.observer.FelderaError(code)
		}
		if !feldera.IsTransactionInProgress(err) {
			c.clearTxnRecord()
			// An unclear answer may have opened one: the next session
			// looks at /stats (settleTransaction).
			if feldera.IsOutcomeUnknown(err) {
				c.txn = &felderaTxn{incarnation: c.incarnation, tables: map[string]bool{}} // ID unknown
			}
			return fmt.Errorf("start a Feldera transaction: %w", err)
		}
		c.stats.TransactionConflicts.Add(1)
		waited := time.Since(start)
		if waited >= c.cfg.CompletionTimeout {
			c.clearTxnRecord()
			return fmt.Errorf("%w: another client has held the pipeline's transaction for %s (409 TransactionInProgress to POST /start_transaction; FELDERA_COMPLETION_TIMEOUT): nothing acknowledged", ErrFelderaUnavailable, waited.Round(time.Millisecond))
		}
		if !warned && waited >= completionLogAfter {
			warned = true
			c.logger.Warn("flush: another client holds Feldera's transaction (409 TransactionInProgress); retrying. Another pgfeldera on this pipeline?", "waited", waited.Round(time.Millisecond))
		}
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			c.clearTxnRecord()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, txnBackoffMax)
	}
}

func (c *Connector) clearTxnRecord() {
	if err := c.fence.Transaction(nil); err != nil {
		c.logger.Warn("fence: could not clear the open-transaction mark", "err", err)
	}
}

// txnPoll is the /stats schedule of the waits below.
func txnPoll(n int) time.Duration {
	return min(time.Duration(1<<min(n, 5))*time.Millisecond, 25*time.Millisecond)
}

// txnState is what /stats says of a transaction this connector holds.
type txnState int

const (
	txnGone       txnState = iota // nothing names it: committed, or dropped
	txnPending                    // initiated by the API; it starts at the next step (after a commit that runs)
	txnTaking                     // it runs: its steps take input
	txnCommitting                 // its commit runs, or was asked and begins at the next step
	txnRestarted                  // the pipeline restarted: it is gone with its process
)

func (v txnState) String() string {
	return [...]string{"gone", "pending", "taking input", "committing", "restarted"}[v]
}

// viewTxn reads a transaction's state from /stats: the running
// transaction's id and status first (controller/stats.rs: the circuit's
// transaction_state), then the initiators (who want one, and the id it
// will have). During an automatic step transaction_id names that step's
// transaction, never ours, so "not the running one" is not "gone":
// ours is gone only when no initiator names it either. incarnation is the
// pipeline process it was opened in ("" when unknown).
func viewTxn(g feldera.GlobalMetrics, id int64, incarnation string) txnState {
	if incarnation != "" && g.IncarnationUUID != incarnation {
		return txnRestarted
	}
	in := g.TransactionInitiators
	named := in != nil && in.TransactionID != nil && *in.TransactionID == id
	api := ""
	if named && in.InitiatedByAPI != nil {
		api = *in.InitiatedByAPI
	}
	switch {
	case g.TransactionID == id && g.TransactionStatus == "TransactionInProgress":
		return txnTaking
	case g.TransactionID == id && g.TransactionStatus == "CommitInProgress":
		return txnCommitting
	case api == "Committed":
		return txnCommitting
	case api == "Started" || named && len(in.InitiatedByConnectors) > 0:
		return txnPending
	case in == nil && g.TransactionID == id && g.TransactionStatus == "NoTransaction":
		return txnPending // a Feldera without initiators shows the pending id
	}
	return txnGone
}

// progressMark is what a wait on Feldera watches: while it changes,
// Feldera is working (steps process input, a commit advances, our
// buffered records are taken), and the wait goes on.
type progressMark struct {
	txnID     int64
	status    string
	processed uint64
	commit    string
	buffered  uint64
}

func markOf(st *feldera.Stats, tables map[string]bool) progressMark {
	g := st.GlobalMetrics
	return progressMark{txnID: g.TransactionID, status: g.TransactionStatus, processed: g.TotalProcessedRecords,
		commit: string(g.CommitProgress), buffered: st.IngressBuffered(tables)}
}

// absorbed waits until the transaction has taken every record POSTed in
// it: it runs under our ID and our ingress endpoints buffer nothing. It
// waits while the transaction is pending behind another's commit (an
// automatic step's, most of the time), and fails only when nothing names
// it any more.
func (c *Connector) absorbed(ctx context.Context) error {
	t := c.txn
	return c.pollStats(ctx, fmt.Sprintf("wait for Feldera transaction %d to take its input", t.id), t.tables, c.cfg.CompletionTimeout, func(st *feldera.Stats) (bool, error) {
		g := st.GlobalMetrics
		c.noteJoined(st)
		if t.incarnation == "" {
			t.incarnation = g.IncarnationUUID
		}
		switch v := viewTxn(g, t.id, t.incarnation); v {
		case txnRestarted:
			return false, fmt.Errorf("feldera pipeline restarted (incarnation %s → %s) while transaction %d was open: it dropped it; replaying from the slot", t.incarnation, g.IncarnationUUID, t.id)
		case txnGone, txnCommitting:
			return false, fmt.Errorf("feldera transaction %d is %s before pgfeldera committed it (/stats transaction_id %d, %s): another client committed it; replaying from the slot", t.id, v, g.TransactionID, g.TransactionStatus)
		case txnTaking:
			if st.IngressBuffered(t.tables) == 0 {
				t.unfedRows, t.unfedBytes = 0, 0
				return true, nil
			}
		}
		return false, nil
	}, func(st *feldera.Stats) error {
		return fmt.Errorf("%w: transaction %d has not taken its input, and Feldera showed no progress for %s (FELDERA_COMPLETION_TIMEOUT; /stats %s, %d records buffered): nothing acknowledged", ErrFelderaUnavailable, t.id, c.cfg.CompletionTimeout, st.GlobalMetrics.TransactionStatus, st.IngressBuffered(t.tables))
	})
}

// absorbedUnlessHooked is absorbed, which the test hook noFeedWait skips:
// the unsafe variant that shows the wait is what keeps a transaction
// whole.
func (c *Connector) absorbedUnlessHooked(ctx context.Context) error {
	if c.test.noFeedWait {
		return nil
	}
	return c.absorbed(ctx)
}

// pollStats reads /stats on txnPoll's schedule until done reports true or
// an error. It gives up once Feldera showed no progress (progressMark)
// for stall; timeout makes the error from the last answer.
func (c *Connector) pollStats(ctx context.Context, what string, tables map[string]bool, stall time.Duration, done func(*feldera.Stats) (bool, error), timeout func(*feldera.Stats) error) error {
	var last progressMark
	moved := time.Now()
	for n := 0; ; n++ {
		st, err := c.sink.Stats(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok, err := done(st); ok || err != nil {
			return err
		}
		if m := markOf(st, tables); n == 0 || m != last {
			last, moved = m, time.Now()
		} else if time.Since(moved) >= stall {
			return timeout(st)
		}
		if err := sleepCtx(ctx, txnPoll(n)); err != nil {
			return err
		}
	}
}

// txnRoom waits, before a POST inside a Feldera transaction, until
// Feldera's ingress buffer has room for b: the transaction's batches
// complete only at its commit, so the in-flight bound on completions does
// not apply to them, but their records leave the buffer as the
// transaction's steps take them, and the buffer bound (felderaQueueRecords,
// felderaQueueBytes) still holds on what is left there.
func (c *Connector) txnRoom(ctx context.Context, b *batch) error {
	t := c.txn
	if t.unfedRows+b.total <= felderaQueueRecords && t.unfedBytes+b.size() <= felderaQueueBytes {
		return nil
	}
	return c.pollStats(ctx, fmt.Sprintf("wait for Feldera transaction %d to take its input", t.id), t.tables, c.cfg.CompletionTimeout, func(st *feldera.Stats) (bool, error) {
		rows, bytes := st.IngressBufferedAll(t.tables)
		t.unfedRows, t.unfedBytes = int(rows), int(bytes)
		return rows == 0 || t.unfedRows+b.total <= felderaQueueRecords && t.unfedBytes+b.size() <= felderaQueueBytes, nil
	}, func(st *feldera.Stats) error {
		return fmt.Errorf("%w: transaction %d has not taken its input, and Feldera showed no progress for %s (FELDERA_COMPLETION_TIMEOUT; %d records buffered): nothing acknowledged", ErrFelderaUnavailable, t.id, c.cfg.CompletionTimeout, t.unfedRows)
	})
}

// noteJoined says once per transaction that input connectors hold it too.
func (c *Connector) noteJoined(st *feldera.Stats) {
	t := c.txn
	in := st.GlobalMetrics.TransactionInitiators
	if t == nil || t.joined || in == nil || len(in.InitiatedByConnectors) == 0 || in.TransactionID == nil || *in.TransactionID != t.id {
		return
	}
	t.joined = true
	names := make([]string, 0, len(in.InitiatedByConnectors))
	for n := range in.InitiatedByConnectors {
		names = append(names, n)
	}
	c.logger.Info("flush: joined a Feldera transaction that input connectors started; its commit waits for them too", "transaction_id", t.id, "connectors", strings.Join(names, ","))
}

// commitTxn commits the transaction and waits until the commit finished.
func (c *Connector) commitTxn(ctx context.Context) error {
	t := c.txn
	crashtest.Point("before_commit")
	err := c.sink.CommitTransaction(ctx)
	switch {
	case feldera.IsNoTransactionInProgress(err):
		// Committed by someone else or dropped by a restart: which one,
		// /stats says below.
		c.logger.Warn("flush: Feldera has no open API transaction to commit (400 NoTransactionInProgress)", "transaction_id", t.id)
	case err != nil:
		if code := feldera.ErrorCode(err); code != "" {
			c.observer.FelderaError(code)
		}
		return fmt.Errorf("commit Feldera transaction %d: %w", t.id, err)
	}
	return c.awaitCommit(ctx)
}

// awaitCommit waits until nothing names the transaction any more: its
// commit finished. A commit takes as long as the views need (minutes on
// a heavy pipeline), so the wait ends only when Feldera showed no
// progress for FELDERA_COMMIT_STALL_TIMEOUT.
func (c *Connector) awaitCommit(ctx context.Context) error {
	t := c.txn
	logged := time.Now()
	return c.pollStats(ctx, fmt.Sprintf("wait for the commit of Feldera transaction %d", t.id), t.tables, c.cfg.CommitStallTimeout, func(st *feldera.Stats) (bool, error) {
		g := st.GlobalMetrics
		switch viewTxn(g, t.id, t.incarnation) {
		case txnRestarted:
			c.txnDone()
			return false, fmt.Errorf("feldera pipeline restarted (incarnation %s → %s) during the commit of transaction %d: replaying from the slot", t.incarnation, g.IncarnationUUID, t.id)
		case txnGone:
			if t.mark != nil {
				t.mark.Committed(time.Now())
			}
			c.txnDone()
			return true, nil
		}
		if time.Since(logged) >= completionLogAfter*6 {
			logged = time.Now()
			c.logger.Info("flush: a Feldera transaction is still committing", "transaction_id", t.id, "status", g.TransactionStatus, "commit_progress", string(g.CommitProgress))
		}
		return false, nil
	}, func(st *feldera.Stats) error {
		// Asked, and committed by the API's side: the next session waits
		// for it, or finds it gone, before it sends anything.
		return fmt.Errorf("%w: the commit of transaction %d showed no progress for %s (FELDERA_COMMIT_STALL_TIMEOUT; /stats %s%s): nothing acknowledged", ErrFelderaUnavailable, t.id, c.cfg.CommitStallTimeout, st.GlobalMetrics.TransactionStatus, waitingFor(st))
	})
}

// txnDone forgets the transaction: it committed, or is gone.
func (c *Connector) txnDone() {
	c.txn = nil
	c.txnClock.Ended(time.Now())
	c.clearTxnRecord()
}

// settleTxn deals with a transaction this connector left open, by a
// session that failed or a previous process (the fence file's record),
// before anything is sent: one still open (or pending) is committed; one
// whose commit runs is waited for, so that a replay never sends a second
// copy of what it commits; one of another pipeline process was dropped by
// its restart.
func (c *Connector) settleTxn(ctx context.Context) error {
	t := c.txn
	if t == nil {
		return nil
	}
	st, err := c.sink.Stats(ctx)
	if err != nil {
		return fmt.Errorf("look for the Feldera transaction left open: %w", err)
	}
	g := st.GlobalMetrics
	if t.id == 0 {
		// Its start got no clear answer: the API's transaction, if the
		// API holds one, is taken for it.
		if in := g.TransactionInitiators; in != nil && in.TransactionID != nil && in.InitiatedByAPI != nil {
			t.id = *in.TransactionID
		}
	}
	c.txnClock.Opened()
	switch v := viewTxn(g, t.id, t.incarnation); v {
	case txnRestarted:
		c.logger.Info("startup: the Feldera transaction left open is gone: the pipeline restarted since", "transaction_id", t.id)
	case txnGone:
		c.logger.Info("startup: Feldera holds no transaction of pgfeldera's: the one left open was committed or never opened", "transaction_id", t.id)
	case txnCommitting:
		c.logger.Warn("startup: the commit of the Feldera transaction left open still runs; waiting for it before sending anything", "transaction_id", t.id)
		t.incarnation = g.IncarnationUUID
		return c.awaitCommit(ctx)
	default:
		t.incarnation = g.IncarnationUUID
		c.logger.Warn("startup: committing the Feldera transaction left open; what it holds becomes visible, and the slot replays the rest", "transaction_id", t.id, "state", v.String())
		return c.commitTxn(ctx)
	}
	c.txnDone()
	return nil
}

// abandonTxn commits, on a failure path, the transaction a batch left
// open, so that no error leaves one open; it is bounded by STOP_TIMEOUT's
// context and 5 s. If even that fails the next session tries again.
func (c *Connector) abandonTxn() {
	if c.txn == nil || c.txn.id == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(c.stopContext(context.Background()), 5*time.Second)
	defer cancel()
	id := c.txn.id
	if err := c.commitTxn(ctx); err != nil && c.txn != nil {
		c.logger.Warn("flush: could not commit the Feldera transaction after a failure; the next session commits it, or waits for its commit", "transaction_id", id, "err", err)
	}
}

// waitingFor names the input connectors a commit waits for, if any.
func waitingFor(st *feldera.Stats) string {
	in := st.GlobalMetrics.TransactionInitiators
	if in == nil || len(in.InitiatedByConnectors) == 0 {
		return ""
	}
	names := make([]string, 0, len(in.InitiatedByConnectors))
	for n := range in.InitiatedByConnectors {
		names = append(names, n)
	}
	return ", waiting for input connectors " + strings.Join(names, ",")
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

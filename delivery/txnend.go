package delivery

import (
	"context"
	"fmt"
	"time"

	"github.com/pgfeldera/pgfeldera/delivery/internal/txnview"
	"github.com/pgfeldera/pgfeldera/state"
)

// How a Feldera transaction ends other than by the commit of a flush
// that ends at a source COMMIT: one a crash or a failed session left open
// (Settle: joined, waited for or committed), one a snapshot or retraction
// needs committed first (Release), one a failure or the process's exit
// leaves (Abandon). Every such commit that holds part of a source
// transaction is said loudly (NotePart).

// Settle deals with a transaction the session left open, by a
// session that failed or a previous process (the fence file's record),
// before anything is sent: one still open (or pending) is committed, or,
// given join, joined (below); one whose commit runs is waited for, so
// that a replay never sends a second copy of what it commits; one of
// another pipeline process was dropped by its restart.
//
// join is, with the progress row, every table the session POSTs to: the
// transaction is kept open, the session's replay goes on in it, and the
// stream commits it at a source transaction's end with the progress row,
// so that no view sees the part the crash left alone (a commit would
// show a prefix of a flush: Feldera has no abort). The progress row read
// meanwhile is the last committed one: Feldera refreshes what ad-hoc
// queries read only at a transaction boundary (controller.rs, step:
// update_snapshot runs once transaction_state is None).
func (x *Transactions) Settle(ctx context.Context, join map[string]bool) error {
	t := x.cur
	if t == nil {
		return nil
	}
	st, err := x.API.Stats(ctx)
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
	x.Clock.Opened()
	if t.incarnation != g.IncarnationUUID && txnview.OpenedAfterRestart(g, t.id) {
		t.incarnation = g.IncarnationUUID // a start that reached the restarted process
	}
	switch v := txnview.Of(g, t.id, t.incarnation); v {
	case txnview.Restarted:
		x.Logger.Info("startup: the Feldera transaction left open is gone: the pipeline restarted since", "transaction_id", t.id)
	case txnview.Gone:
		x.Logger.Info("startup: Feldera holds no transaction of pgfeldera's: the one left open was committed or never opened", "transaction_id", t.id)
	case txnview.Committing:
		x.Logger.Warn("startup: the commit of the Feldera transaction left open still runs; waiting for it before sending anything", "transaction_id", t.id)
		t.incarnation = g.IncarnationUUID
		return x.awaitCommit(ctx)
	default:
		t.incarnation = g.IncarnationUUID
		if join != nil && t.id != 0 && !t.whole {
			t.tables, t.mark = join, &TxnMark{}
			t.rejoined = true
			// What the dead process left in Feldera's buffer is not
			// known: Room reads /stats before the first POST.
			t.unfedRows, t.unfedBytes = QueueRecords, QueueBytes
			x.Logger.Warn("startup: joining the Feldera transaction left open: the replay goes on in it, and it commits at a source transaction's end with the progress row", "transaction_id", t.id, "state", v.String())
			return nil
		}
		if t.whole {
			x.Logger.Info("startup: committing the Feldera transaction left open: it holds whole source transactions, its progress row last", "transaction_id", t.id, "state", v.String())
		} else {
			x.Logger.Warn("startup: committing the Feldera transaction left open; what it holds becomes visible, and the slot replays the rest", "transaction_id", t.id, "state", v.String())
			x.NotePart(t.id, "left open by a crash or a failed session, and without the progress table the replay cannot join it: the slot replays the rest")
		}
		return x.Commit(ctx)
	}
	x.done()
	return nil
}

// NotePart says loudly, counts and records in the fence file (for
// `pgfeldera status`) that Feldera transaction id (0: the one open) is
// committed holding part of a source transaction: views see a prefix of
// it until the rest comes. why says what forced the commit.
func (x *Transactions) NotePart(id int64, why string) {
	x.Logger.Error("flush: committing a Feldera transaction that holds part of a source transaction: views see a prefix of it until the rest comes", "transaction_id", id, "why", why)
	if x.Partial != nil {
		x.Partial.Add(1)
	}
	if err := x.Fence.PartialCommitted(&state.PartialCommit{TransactionID: id, At: time.Now(), Why: why}); err != nil {
		x.Logger.Warn("fence: could not record the partial commit", "err", err)
	}
}

// Release commits the transaction held open before a send that starts
// its own or waits for completions, which nothing inside a transaction
// gets before its commit: one the session joined (Settle) and that a
// snapshot, a retraction or a progress reset now precedes.
func (x *Transactions) Release(ctx context.Context) error {
	if x == nil || x.cur == nil {
		return nil
	}
	x.NotePart(x.cur.id, "a snapshot, a retraction or a progress reset needs everything sent complete, and the joined transaction held the replay's part")
	return x.Commit(ctx)
}

// Abandon commits, on a failure path or as the process exits, the
// transaction a batch left open, so that nothing leaves one open (it
// would hold every other writer's input and every checkpoint); why says
// what forced it, and the commit is said loudly (NotePart). It is
// bounded by stop (STOP_TIMEOUT's context) and 5 s. If even that fails
// the next session, or process, tries again.
func (x *Transactions) Abandon(stop context.Context, why string) {
	if x.cur == nil || x.cur.id == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(stop, 5*time.Second)
	defer cancel()
	id := x.cur.id
	x.NotePart(id, why)
	if err := x.Commit(ctx); err != nil && x.cur != nil {
		x.Logger.Warn("flush: could not commit the Feldera transaction after a failure; the next session commits it, or waits for its commit", "transaction_id", id, "err", err)
	}
}

package delivery

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// Ledger is a session's acknowledgement rule, free of I/O, and the only
// writer of the acknowledged position: what a status update reports as
// flushed, so what Postgres may forget. The frontier orders the batches
// sent and the gate; the ledger adds what the session learns from the
// stream itself:
//
//   - a COMMIT whose rows the filling batch holds is acknowledged with the
//     batch that carries it (Seal hands it over), never before;
//   - a COMMIT with nothing buffered needs only what was sent before it
//     (its rows went out in earlier batches, a TRUNCATE retracted them,
//     or it had none): it is reached, and durable once those are;
//   - a keepalive at a moment when the session is quiet (nothing open,
//     buffered, pending or in flight) shows every byte below the server's
//     WAL end read and nothing owed for it: it is reached, so an idle slot
//     releases the WAL that writes to unpublished tables make;
//   - in accepted mode a batch counts as complete when Feldera accepted
//     it (unsafe, kept to demonstrate the loss);
//   - completions, checkpoints and (exactly_once) looks at the pipeline
//     move the frontier.
//
// The ledger keeps the session's step watermark: the highest step any
// completion or retraction reported. A reached position (a COMMIT with
// nothing buffered, an emptied batch, a quiet keepalive) must wait for a
// checkpoint to cover it under the checkpoint gate: a TRUNCATE's
// retraction is no batch of the frontier, and reaches the gate only
// through it.
//
// With the progress row (KeepRows), no position past the row Feldera
// holds is reached without a batch: a COMMIT with nothing buffered, a
// quiet keepalive's WAL end and the COMMITs of an emptied batch are
// recorded as the filling batch's COMMIT instead, and a batch (with no
// rows, the row alone) carries them. So the slot never passes the row,
// and a row below the slot means Feldera lost what was acknowledged.
//
// The position never moves back. It starts at the slot's confirmed
// position.
type Ledger struct {
	front  *frontier
	acked  pglogrepl.LSN // the acknowledged position
	commit pglogrepl.LSN // the last COMMIT whose rows the filling batch holds; 0: none
	step   uint64        // the step watermark
	rows   bool          // positions past rowAt go out in a batch (KeepRows)
	rowAt  pglogrepl.LSN // the progress row's position at the session's start
}

// NewLedger starts a session's ledger at the slot's confirmed position
// from. With confirm (exactly_once) a completion counts only once a look
// at the pipeline begun after it found the session's process (see
// frontier).
func NewLedger(g Gate, from pglogrepl.LSN, confirm bool) *Ledger {
	f := newFrontier(g, from)
	f.confirm = confirm
	return &Ledger{front: f, acked: from}
}

// KeepRows puts the ledger in progress-row mode: a position past at, the
// row Feldera held when the session began, is acknowledged only with a
// batch that carries it (and so writes the row). Positions at or below at
// (source transactions the session skips) are Feldera's already.
func (l *Ledger) KeepRows(at pglogrepl.LSN) { l.rows, l.rowAt = true, at }

// carried reports whether a position reached without rows must still go
// out in a batch: in progress-row mode, past the row.
func (l *Ledger) carried(end pglogrepl.LSN) bool { return l.rows && end > l.rowAt }

// record makes end a COMMIT the filling batch carries.
func (l *Ledger) record(end pglogrepl.LSN) {
	if end > l.acked {
		l.commit = max(l.commit, end)
	}
}

// Acked is the acknowledged position: what a status update reports as
// flushed.
func (l *Ledger) Acked() pglogrepl.LSN { return l.acked }

// set records the frontier's durable position; it returns whether the
// acknowledged position moved.
func (l *Ledger) set(durable pglogrepl.LSN) bool {
	if durable > l.acked {
		l.acked = durable
		return true
	}
	return false
}

// Committed applies a COMMIT that ends at end; buffered says the filling
// batch holds rows (of this transaction or an earlier one).
func (l *Ledger) Committed(end pglogrepl.LSN, buffered bool, now time.Time) bool {
	if buffered {
		l.commit = max(l.commit, end)
		return false
	}
	if end <= l.acked {
		return false
	}
	if l.carried(end) {
		l.record(end)
		return false
	}
	return l.set(l.front.reach(end, l.step, now))
}

// Recorded is the COMMIT the filling batch carries (0: none yet).
func (l *Ledger) Recorded() pglogrepl.LSN { return l.commit }

// RowOwed reports whether the filling batch, even with no rows, carries a
// position the slot cannot reach without it (progress-row mode).
func (l *Ledger) RowOwed() bool { return l.carried(l.commit) && l.commit > l.acked }

// Seal enters the filling batch, about to be sent, with the COMMIT it
// carries (0 when it ends inside a transaction): it returns the batch's
// id and that position.
func (l *Ledger) Seal(now time.Time) (uint64, pglogrepl.LSN) {
	to := l.commit
	l.commit = 0
	return l.front.enter(to, now), to
}

// Emptied applies a filling batch that holds no rows but recorded a
// COMMIT (a TRUNCATE discarded its rows): the COMMITs need nothing more
// than what was sent before them.
func (l *Ledger) Emptied(now time.Time) bool {
	if l.commit == 0 || l.carried(l.commit) {
		return false
	}
	to := l.commit
	l.commit = 0
	return l.set(l.front.reach(to, l.step, now))
}

// Keepalive applies a keepalive whose server WAL end is walEnd; quiet
// says the session has nothing open, buffered or in flight.
func (l *Ledger) Keepalive(walEnd pglogrepl.LSN, quiet bool, now time.Time) bool {
	if !quiet || l.Pending() {
		return false
	}
	if l.carried(walEnd) {
		l.record(walEnd)
		return false
	}
	return l.set(l.front.reach(walEnd, l.step, now))
}

// Accepted applies Feldera's 200 to batch id in accepted mode.
func (l *Ledger) Accepted(id uint64, now time.Time) bool {
	return l.set(l.front.done(id, 0, now))
}

// Completed applies batch id's completion at step.
func (l *Ledger) Completed(id, step uint64, now time.Time) bool {
	l.Stepped(step)
	return l.set(l.front.done(id, step, now))
}

// Stepped raises the step watermark to step: the steps of work sent
// outside the frontier's batches (a TRUNCATE's retraction, which waits
// for its own completions), which a position reached after it must wait
// for a checkpoint to cover.
func (l *Ledger) Stepped(step uint64) { l.step = max(l.step, step) }

// Step is the step watermark.
func (l *Ledger) Step() uint64 { return l.step }

// Checkpointed applies the newest checkpoint that covers the session's
// work, by its steps.
func (l *Ledger) Checkpointed(steps uint64) bool {
	return l.set(l.front.checkpointed(steps))
}

// ConfirmedAt applies a look at the pipeline, begun at t, that found the
// session's process (exactly_once).
func (l *Ledger) ConfirmedAt(t time.Time) bool {
	return l.set(l.front.confirmedAt(t))
}

// Pending reports whether the ledger holds anything not yet acknowledged:
// a COMMIT waiting for its batch, or batches not yet durable.
func (l *Ledger) Pending() bool {
	return l.commit > l.acked || l.front.pending()
}

// The frontier's facts the session reports and paces by. They change
// nothing.

// Queued reports whether anything sent or reached is not yet durable.
func (l *Ledger) Queued() bool { return l.front.pending() }

// Confirms reports whether completions wait for a look at the pipeline
// (exactly_once).
func (l *Ledger) Confirms() bool { return l.front.confirm }

// Covered is the newest checkpoint's steps the ledger applied.
func (l *Ledger) Covered() uint64 { return l.front.covered }

// InFlight is the number of batches sealed and not yet complete.
func (l *Ledger) InFlight() int { return l.front.inFlight() }

// OldestOpen is when the oldest batch still incomplete was sealed.
func (l *Ledger) OldestOpen() (time.Time, bool) { return l.front.oldestOpen() }

// Waiting reports whether completed batches wait for nothing but a
// checkpoint, and since when the oldest of them waits.
func (l *Ledger) Waiting() (time.Time, bool) { return l.front.waiting() }

// WaitingWAL is the WAL a checkpoint now would let the slot release.
func (l *Ledger) WaitingWAL() uint64 { return l.front.waitingWAL() }

// CompletedTo is the highest position of the complete prefix: what
// Feldera's views show, durable or not.
func (l *Ledger) CompletedTo() pglogrepl.LSN { return l.front.completed() }

// HighestPending is the step a checkpoint must cover for every completed
// batch to be durable.
func (l *Ledger) HighestPending() uint64 { return l.front.highestPending() }

// AckAtCompletion moves the ledger to the completion gate: Feldera
// journals its input again after a program change's first checkpoint
// (exactly_once), so what completes is durable.
func (l *Ledger) AckAtCompletion() { l.front.gate = GateComplete }

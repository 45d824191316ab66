package connector

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// ledger is a session's acknowledgement rule, free of I/O, and the only
// writer of the acknowledged position: what a status update reports as
// flushed, so what Postgres may forget. The frontier orders the batches
// sent and the gate; the ledger adds what the session learns from the
// stream itself:
//
//   - a COMMIT whose rows the filling batch holds is acknowledged with the
//     batch that carries it (seal hands it over), never before;
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
// step, where a rule takes one, is the step watermark: the highest step
// any completion or retraction reported, which a reached position must
// wait for a checkpoint to cover under the checkpoint gate.
//
// The position never moves back. It starts at the slot's confirmed
// position.
type ledger struct {
	front  *frontier
	acked  pglogrepl.LSN // the acknowledged position
	commit pglogrepl.LSN // the last COMMIT whose rows the filling batch holds; 0: none
}

func newLedger(g Gate, from pglogrepl.LSN) *ledger {
	return &ledger{front: newFrontier(g, from), acked: from}
}

// set records the frontier's durable position; it returns whether the
// acknowledged position moved.
func (l *ledger) set(durable pglogrepl.LSN) bool {
	if durable > l.acked {
		l.acked = durable
		return true
	}
	return false
}

// committed applies a COMMIT that ends at end; buffered says the filling
// batch holds rows (of this transaction or an earlier one).
func (l *ledger) committed(end pglogrepl.LSN, buffered bool, step uint64, now time.Time) bool {
	if buffered {
		l.commit = max(l.commit, end)
		return false
	}
	if end <= l.acked {
		return false
	}
	return l.set(l.front.reach(end, step, now))
}

// seal enters the filling batch, about to be sent, with the COMMIT it
// carries (0 when it ends inside a transaction): it returns the batch's
// id and that position.
func (l *ledger) seal(now time.Time) (uint64, pglogrepl.LSN) {
	to := l.commit
	l.commit = 0
	return l.front.enter(to, now), to
}

// emptied applies a filling batch that holds no rows but recorded a
// COMMIT (a TRUNCATE discarded its rows): the COMMITs need nothing more
// than what was sent before them.
func (l *ledger) emptied(step uint64, now time.Time) bool {
	if l.commit == 0 {
		return false
	}
	to := l.commit
	l.commit = 0
	return l.set(l.front.reach(to, step, now))
}

// keepalive applies a keepalive whose server WAL end is walEnd; quiet
// says the session has nothing open, buffered or in flight.
func (l *ledger) keepalive(walEnd pglogrepl.LSN, quiet bool, step uint64, now time.Time) bool {
	if !quiet || l.pending() {
		return false
	}
	return l.set(l.front.reach(walEnd, step, now))
}

// accepted applies Feldera's 200 to batch id in accepted mode.
func (l *ledger) accepted(id uint64, now time.Time) bool {
	return l.set(l.front.done(id, 0, now))
}

// completed applies batch id's completion at step.
func (l *ledger) completed(id, step uint64, now time.Time) bool {
	return l.set(l.front.done(id, step, now))
}

// checkpointed applies the newest checkpoint that covers the session's
// work, by its steps.
func (l *ledger) checkpointed(steps uint64) bool {
	return l.set(l.front.checkpointed(steps))
}

// confirmedAt applies a look at the pipeline, begun at t, that found the
// session's process (exactly_once).
func (l *ledger) confirmedAt(t time.Time) bool {
	return l.set(l.front.confirmedAt(t))
}

// pending reports whether the ledger holds anything not yet acknowledged:
// a COMMIT waiting for its batch, or batches not yet durable.
func (l *ledger) pending() bool {
	return l.commit > l.acked || l.front.pending()
}

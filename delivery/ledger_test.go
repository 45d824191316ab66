package delivery

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// ledgerStep is one rule applied to a ledger, and the acknowledged
// position it must leave.
type ledgerStep struct {
	what string
	do   func(l *Ledger, ids map[string]uint64) bool
	want pglogrepl.LSN
}

var t0 = time.Unix(1000, 0)

func commit(end pglogrepl.LSN, buffered bool, want pglogrepl.LSN) ledgerStep {
	return ledgerStep{fmt.Sprintf("COMMIT %s buffered=%v", end, buffered), func(l *Ledger, _ map[string]uint64) bool {
		return l.Committed(end, buffered, t0)
	}, want}
}

// stepped is work outside the frontier's batches (a TRUNCATE's
// retraction) completed at step.
func stepped(step uint64, want pglogrepl.LSN) ledgerStep {
	return ledgerStep{fmt.Sprintf("retraction complete at step %d", step), func(l *Ledger, _ map[string]uint64) bool {
		l.Stepped(step)
		return false
	}, want}
}

func seal(name string, want pglogrepl.LSN) ledgerStep {
	return ledgerStep{"seal " + name, func(l *Ledger, ids map[string]uint64) bool {
		ids[name], _ = l.Seal(t0)
		return false
	}, want}
}

func complete(name string, step uint64, want pglogrepl.LSN) ledgerStep {
	return ledgerStep{fmt.Sprintf("complete %s at step %d", name, step), func(l *Ledger, ids map[string]uint64) bool {
		return l.Completed(ids[name], step, t0)
	}, want}
}

func accept(name string, want pglogrepl.LSN) ledgerStep {
	return ledgerStep{"accepted " + name, func(l *Ledger, ids map[string]uint64) bool {
		return l.Accepted(ids[name], t0)
	}, want}
}

func keepalive(walEnd pglogrepl.LSN, quiet bool, want pglogrepl.LSN) ledgerStep {
	return ledgerStep{fmt.Sprintf("keepalive %s quiet=%v", walEnd, quiet), func(l *Ledger, _ map[string]uint64) bool {
		return l.Keepalive(walEnd, quiet, t0)
	}, want}
}

func emptied(want pglogrepl.LSN) ledgerStep {
	return ledgerStep{"emptied", func(l *Ledger, _ map[string]uint64) bool { return l.Emptied(t0) }, want}
}

// keepRows puts the ledger in progress-row mode, the row at at.
func keepRows(at pglogrepl.LSN, want pglogrepl.LSN) ledgerStep {
	return ledgerStep{fmt.Sprintf("progress row at %s", at), func(l *Ledger, _ map[string]uint64) bool {
		l.KeepRows(at)
		return false
	}, want}
}

func checkpoint(steps uint64, want pglogrepl.LSN) ledgerStep {
	return ledgerStep{fmt.Sprintf("checkpoint covering step %d", steps), func(l *Ledger, _ map[string]uint64) bool {
		return l.Checkpointed(steps)
	}, want}
}

// Every rule of the acknowledgement, one history each. The position must
// be exactly the one given after every step: a rule that moves it early
// acknowledges WAL Feldera does not hold (a loss after a crash), one that
// moves it late retains WAL (and with an idle slot, without bound).
func TestLedger(t *testing.T) {
	const from = 100
	for _, c := range []struct {
		name  string
		gate  Gate
		steps []ledgerStep
	}{
		{"a COMMIT whose rows are buffered waits for the batch that carries it", GateComplete, []ledgerStep{
			commit(200, true, from),
			seal("b1", from),
			complete("b1", 1, 200),
		}},
		{"a batch that ends inside a transaction acknowledges nothing", GateComplete, []ledgerStep{
			seal("b1", from), // rows of an open transaction, no COMMIT yet
			complete("b1", 1, from),
			commit(300, true, from), // the rest of it buffered
			seal("b2", from),
			complete("b2", 2, 300),
		}},
		{"a COMMIT with nothing buffered and nothing pending moves at once", GateComplete, []ledgerStep{
			commit(200, false, 200),
		}},
		{"a COMMIT with nothing buffered waits for the batches sent before it", GateComplete, []ledgerStep{
			commit(200, true, from),
			seal("b1", from),
			commit(300, false, from), // its rows went out in b1
			complete("b1", 1, 300),
		}},
		{"a COMMIT at or below the position changes nothing", GateComplete, []ledgerStep{
			commit(200, false, 200),
			commit(150, false, 200),
		}},
		{"batches become durable in order, whatever order they complete in", GateComplete, []ledgerStep{
			commit(200, true, from),
			seal("b1", from),
			commit(300, true, from),
			seal("b2", from),
			complete("b2", 2, from),
			complete("b1", 1, 300),
		}},
		{"a quiet keepalive releases the WAL below the server's end", GateComplete, []ledgerStep{
			keepalive(500, true, 500),
			keepalive(400, true, 500), // never back
		}},
		{"a keepalive while a transaction is open or rows are buffered releases nothing", GateComplete, []ledgerStep{
			keepalive(500, false, from),
		}},
		{"a keepalive while a COMMIT waits for its batch releases nothing", GateComplete, []ledgerStep{
			commit(200, true, from),
			keepalive(500, true, from),
		}},
		{"a keepalive while a batch is not yet durable releases nothing", GateComplete, []ledgerStep{
			commit(200, true, from),
			seal("b1", from),
			keepalive(500, true, from),
			complete("b1", 1, 200),
			keepalive(500, true, 500),
		}},
		{"a TRUNCATE that empties the batch leaves its COMMITs nothing to wait for", GateComplete, []ledgerStep{
			commit(200, true, from),
			emptied(200),
			emptied(200), // once
		}},
		{"under the checkpoint gate a completion waits for a checkpoint covering its step", GateCheckpoint, []ledgerStep{
			commit(200, true, from),
			seal("b1", from),
			complete("b1", 5, from),
			checkpoint(4, from),
			checkpoint(5, 200),
		}},
		{"under the checkpoint gate a reached COMMIT waits for the step watermark (a retraction's steps)", GateCheckpoint, []ledgerStep{
			stepped(7, from),
			commit(200, false, from),
			checkpoint(6, from),
			checkpoint(7, 200),
		}},
		{"under the checkpoint gate a TRUNCATE's retraction holds the COMMITs of the batch it emptied until a checkpoint covers it", GateCheckpoint, []ledgerStep{
			commit(200, true, from),
			stepped(9, from),
			emptied(from),
			checkpoint(8, from),
			checkpoint(9, 200),
		}},
		{"the step watermark never goes back", GateCheckpoint, []ledgerStep{
			stepped(9, from),
			stepped(4, from),
			commit(300, false, from),
			checkpoint(4, from),
			checkpoint(9, 300),
		}},
		{"under the checkpoint gate a quiet keepalive waits for the step watermark", GateCheckpoint, []ledgerStep{
			stepped(3, from),
			keepalive(500, true, from),
			checkpoint(3, 500),
		}},
		{"with the progress row, a COMMIT with nothing buffered waits for a batch to carry it", GateComplete, []ledgerStep{
			keepRows(0, from),
			commit(200, false, from),
			seal("row", from),
			complete("row", 1, 200),
		}},
		{"with the progress row, a quiet keepalive waits for a batch to carry its WAL end", GateComplete, []ledgerStep{
			keepRows(0, from),
			keepalive(500, true, from),
			keepalive(600, true, from), // the first one waits: pending
			seal("row", from),
			complete("row", 1, 500),
			keepalive(600, true, 500),
			seal("row2", 500),
			complete("row2", 2, 600),
		}},
		{"with the progress row, a TRUNCATE that empties the batch leaves its COMMITs to a batch", GateComplete, []ledgerStep{
			keepRows(0, from),
			commit(200, true, from),
			emptied(from),
			seal("row", from),
			complete("row", 1, 200),
		}},
		{"with the progress row, positions at or below it (skipped transactions) move at once", GateComplete, []ledgerStep{
			keepRows(300, from),
			commit(200, false, 200),
			commit(300, false, 300),
			keepalive(300, true, 300),
			commit(400, false, 300), // past the row: a batch carries it
			seal("row", 300),
			complete("row", 1, 400),
		}},
		{"with the progress row under the checkpoint gate, the row's batch waits for a checkpoint", GateCheckpoint, []ledgerStep{
			keepRows(0, from),
			keepalive(500, true, from),
			seal("row", from),
			complete("row", 4, from),
			checkpoint(4, 500),
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := NewLedger(c.gate, from, false)
			ids := map[string]uint64{}
			for i, st := range c.steps {
				before := l.acked
				moved := st.do(l, ids)
				if l.acked != st.want {
					t.Fatalf("step %d (%s): position %s, want %s", i, st.what, l.acked, st.want)
				}
				if moved != (l.acked > before) {
					t.Fatalf("step %d (%s): reported moved=%v, but the position went %s → %s", i, st.what, moved, before, l.acked)
				}
			}
		})
	}
}

// Accepted mode (unsafe, kept to demonstrate the loss) counts a batch
// complete when Feldera accepted it: the position moves before Feldera
// completed anything.
func TestLedger_AcceptedModeMovesAtAcceptance(t *testing.T) {
	l := NewLedger(GateComplete, 100, false)
	ids := map[string]uint64{}
	for i, st := range []ledgerStep{
		commit(200, true, 100),
		seal("b1", 100),
		accept("b1", 200),
	} {
		st.do(l, ids)
		if l.acked != st.want {
			t.Fatalf("step %d (%s): position %s, want %s", i, st.what, l.acked, st.want)
		}
	}
}

// The ledger reports pending while a COMMIT waits for its batch or a
// batch is not yet durable, which holds the keepalive rule off.
func TestLedger_Pending(t *testing.T) {
	l := NewLedger(GateComplete, 100, false)
	if l.Pending() {
		t.Fatal("a new ledger is pending")
	}
	l.Committed(200, true, t0)
	if !l.Pending() {
		t.Fatal("a COMMIT waiting for its batch is not pending")
	}
	id, to := l.Seal(t0)
	if to != 200 || !l.Pending() {
		t.Fatalf("sealed with %s, pending %v: want 200, true", to, l.Pending())
	}
	l.Completed(id, 1, t0)
	if l.Pending() || l.acked != 200 {
		t.Fatalf("after completion: pending %v, position %s", l.Pending(), l.acked)
	}
}

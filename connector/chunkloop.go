package connector

import (
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/snapshot"
)

// chunkLoop is the stream loop's rule for an incremental snapshot, as a
// pure type fed the stream's events in order: which transactions changed
// a table still to read (the xip rule), the window between a chunk's
// watermarks, what a chunk keeps at its high watermark, and when each
// chunk may be recorded. It does no I/O; the stream turns its answers
// into the outbox, the worker's next step and the state file. The
// argument it implements is in snapshot/chunk.go.
type chunkLoop struct {
	win      snapshot.Window // open between a chunk's watermarks
	winSeq   uint64
	winRoute int
	winLow   pglogrepl.LSN // the commit position of the low watermark's transaction

	recent  snapshot.Recent
	xid     uint32        // the source transaction being read
	final   pglogrepl.LSN // its commit position, from its BEGIN
	touched bool          // it changed a mapped table

	holding *chunk     // kept rows of the chunk whose high watermark's transaction is being read
	pending *chunkSave // that chunk's record, waiting for the transaction's end
	saves   []chunkSave
}

func newChunkLoop() *chunkLoop { return &chunkLoop{} }

// begin is a source transaction's BEGIN.
func (l *chunkLoop) begin(xid uint32, final pglogrepl.LSN) {
	l.xid, l.final, l.touched = xid, final, false
}

// rows is a change to route: the keys it touched, and whether one could
// not be known.
func (l *chunkLoop) rows(route int, keys []string, unknown bool) {
	l.touched = true
	if !l.win.Active() || route != l.winRoute {
		return
	}
	for _, k := range keys {
		l.win.Touch(k)
	}
	if unknown {
		l.win.Poison("a change to a row whose key the stream does not carry (a NULL or unchanged TOAST key column)")
	}
}

// truncated is a TRUNCATE of route.
func (l *chunkLoop) truncated(route int) {
	l.touched = true
	if l.win.Active() && route == l.winRoute {
		l.win.Poison("a TRUNCATE of the table")
	}
}

// commit is the transaction's COMMIT. It returns the kept rows of a chunk
// whose high watermark this transaction carried (nil for none): they
// enter the outbox now, and the chunk may be recorded once the
// acknowledged position reaches end.
func (l *chunkLoop) commit(commit, end pglogrepl.LSN) *chunk {
	if l.touched {
		l.recent.Add(l.xid, uint64(commit))
	}
	l.touched = false
	if l.pending != nil {
		l.pending.lsn = end
		l.saves = append(l.saves, *l.pending)
		l.pending = nil
	}
	h := l.holding
	l.holding = nil
	return h
}

// low opens the window of chunk seq on route, at the low watermark of the
// transaction being read.
func (l *chunkLoop) low(seq uint64, route int) error {
	if l.win.Active() {
		return fmt.Errorf("incremental snapshot: low watermark of chunk %d while chunk %d's window is open", seq, l.winSeq)
	}
	l.win.Open()
	l.winSeq, l.winRoute, l.winLow = seq, route, l.final
	return nil
}

// high closes the window at chunk seq's high watermark with ch, the rows
// the worker read. why says why the chunk must be read again ("" when it
// need not); otherwise the rows the stream did not change between the
// watermarks are held for the transaction's commit. keepAll keeps every
// row (the unsafe variant the tests show losing).
func (l *chunkLoop) high(seq uint64, ch *chunk, keepAll bool) (why string, err error) {
	if !l.win.Active() || l.winSeq != seq {
		return "", fmt.Errorf("incremental snapshot: high watermark of chunk %d without its low watermark", seq)
	}
	l.win.Close()
	if ch == nil {
		return "", fmt.Errorf("incremental snapshot: high watermark of chunk %d before its rows", seq)
	}
	if ch.seq != seq {
		return "", fmt.Errorf("incremental snapshot: the rows of chunk %d arrived at the high watermark of chunk %d", ch.seq, seq)
	}
	if ch.discard {
		return "read ahead of a chunk that is read again", nil
	}
	if why = l.win.Poisoned(); why != "" {
		return why, nil
	}
	if x, ok := l.recent.CommittedBefore(ch.xip, uint64(l.winLow)); ok {
		return fmt.Sprintf("transaction %d committed before the low watermark but was still in progress for the chunk's snapshot", x), nil
	}
	kept := ch
	if l.win.Touched() > 0 && !keepAll {
		kept = &chunk{seq: ch.seq, table: ch.table, last: ch.last, done: ch.done, retract: ch.retract}
		start := 0
		for i, end := range ch.ends {
			if l.win.Keep(ch.keys[i]) {
				kept.buf = append(kept.buf, ch.buf[start:end]...)
				kept.ends = append(kept.ends, len(kept.buf))
				kept.keys = append(kept.keys, ch.keys[i])
			}
			start = end
		}
	}
	l.holding = kept
	l.pending = &chunkSave{table: ch.table, rows: int64(len(kept.ends)), last: ch.last, done: ch.done, retract: ch.retract}
	return "", nil
}

// due pops the chunks whose high watermark's transaction ended at or
// before acked, in order.
func (l *chunkLoop) due(acked pglogrepl.LSN) []chunkSave {
	n := 0
	for n < len(l.saves) && l.saves[n].lsn <= acked {
		n++
	}
	out := l.saves[:n:n]
	l.saves = l.saves[n:]
	return out
}

package incremental

import (
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/snapshot"
)

// Loop is the stream loop's rule for an incremental snapshot, as a
// pure type fed the stream's events in order: which transactions changed
// a table still to read (the xip rule), the window between a chunk's
// watermarks, what a chunk keeps at its high watermark, and when each
// chunk may be recorded. It does no I/O; the stream turns its answers
// into the outbox, the worker's next step and the state file. The
// argument it implements is in snapshot/chunk.go.
//
// Several chunks may be open at once (SNAPSHOT_PARALLELISM: each lane of
// a table has its own connection and its own watermarks); each has its
// own window, and the argument holds for each on its own: a chunk's rows
// enter the outbox at its own high watermark, reconciled with the changes
// between its own watermarks.
type Loop struct {
	wins map[uint64]*chunkWin // open between a chunk's watermarks, by chunk

	recent  snapshot.Recent
	xid     uint32        // the source transaction being read
	final   pglogrepl.LSN // its commit position, from its BEGIN
	touched bool          // it changed a mapped table

	holding *Chunk // kept rows of the chunk whose high watermark's transaction is being read
	pending *Save  // that chunk's record, waiting for the transaction's end
	saves   []Save
}

// chunkWin is one open chunk's window.
type chunkWin struct {
	win   snapshot.Window
	route int
	low   pglogrepl.LSN // the commit position of the low watermark's transaction
}

// NewLoop is the rule with nothing open.
func NewLoop() *Loop { return &Loop{wins: map[uint64]*chunkWin{}} }

// RouteOf is the route of chunk seq's open window; -1 when none is open.
func (l *Loop) RouteOf(seq uint64) int {
	if w := l.wins[seq]; w != nil {
		return w.route
	}
	return -1
}

// Watching reports whether a window is open on route (the stream must
// then carry its changes' keys).
func (l *Loop) Watching(route int) bool {
	for _, w := range l.wins {
		if w.route == route {
			return true
		}
	}
	return false
}

// Begin is a source transaction's BEGIN.
func (l *Loop) Begin(xid uint32, final pglogrepl.LSN) {
	l.xid, l.final, l.touched = xid, final, false
}

// Rows is a change to route: the keys it touched, and whether one could
// not be known.
func (l *Loop) Rows(route int, keys []string, unknown bool) {
	l.touched = true
	for _, w := range l.wins {
		if w.route != route {
			continue
		}
		for _, k := range keys {
			w.win.Touch(k)
		}
		if unknown {
			w.win.Poison("a change to a row whose key the stream does not carry (a NULL or unchanged TOAST key column)")
		}
	}
}

// Truncated is a TRUNCATE of route.
func (l *Loop) Truncated(route int) {
	l.touched = true
	for _, w := range l.wins {
		if w.route == route {
			w.win.Poison("a TRUNCATE of the table")
		}
	}
}

// Commit is the transaction's COMMIT. It returns the kept rows of a chunk
// whose high watermark this transaction carried (nil for none): they
// enter the outbox now, and the chunk may be recorded once the
// acknowledged position reaches end.
func (l *Loop) Commit(commit, end pglogrepl.LSN) *Chunk {
	if l.touched {
		l.recent.Add(l.xid, uint64(commit))
	}
	l.touched = false
	if l.pending != nil {
		l.pending.LSN = end
		l.saves = append(l.saves, *l.pending)
		l.pending = nil
	}
	h := l.holding
	l.holding = nil
	return h
}

// Low opens the window of chunk seq on route, at the low watermark of the
// transaction being read.
func (l *Loop) Low(seq uint64, route int) error {
	if l.wins[seq] != nil {
		return fmt.Errorf("incremental snapshot: a second low watermark of chunk %d", seq)
	}
	w := &chunkWin{route: route, low: l.final}
	w.win.Open()
	l.wins[seq] = w
	return nil
}

// High closes the window at chunk seq's high watermark with ch, the rows
// the worker read. why says why the chunk must be read again ("" when it
// need not); otherwise the rows the stream did not change between the
// watermarks are held for the transaction's commit. keepAll keeps every
// row (the unsafe variant the tests show losing).
func (l *Loop) High(seq uint64, ch *Chunk, keepAll bool) (why string, err error) {
	w := l.wins[seq]
	if w == nil {
		return "", fmt.Errorf("incremental snapshot: high watermark of chunk %d without its low watermark", seq)
	}
	delete(l.wins, seq)
	w.win.Close()
	if ch == nil {
		return "", fmt.Errorf("incremental snapshot: high watermark of chunk %d before its rows", seq)
	}
	if ch.Seq != seq {
		return "", fmt.Errorf("incremental snapshot: the rows of chunk %d arrived at the high watermark of chunk %d", ch.Seq, seq)
	}
	if ch.Discard {
		return "read ahead of a chunk that is read again", nil
	}
	if why = w.win.Poisoned(); why != "" {
		return why, nil
	}
	if x, ok := l.recent.CommittedBefore(ch.snap, uint64(w.low)); ok {
		return fmt.Sprintf("transaction %d committed before the low watermark but was invisible to the chunk's snapshot", x), nil
	}
	if l.holding != nil {
		// One transaction carries at most one high watermark whose rows
		// are kept (the others it carries are of discarded chunks).
		return "", fmt.Errorf("incremental snapshot: high watermarks of chunks %d and %d in one transaction", l.holding.Seq, seq)
	}
	kept := ch
	if w.win.Touched() > 0 && !keepAll {
		kept = &Chunk{Seq: ch.Seq, Table: ch.Table, last: ch.last, Done: ch.Done, Retract: ch.Retract}
		start := 0
		for i, end := range ch.Ends {
			if w.win.KeepBytes(ch.key(i)) {
				kept.Buf = append(kept.Buf, ch.Buf[start:end]...)
				kept.Ends = append(kept.Ends, len(kept.Buf))
				kept.addKey(ch.key(i))
			}
			start = end
		}
	}
	l.holding = kept
	l.pending = &Save{Lane: ch.lane, Table: ch.Table, Rows: int64(len(kept.Ends)), Last: ch.last, Done: ch.Done, Retract: ch.Retract}
	return "", nil
}

// Due pops the chunks whose high watermark's transaction ended at or
// before acked, in order.
func (l *Loop) Due(acked pglogrepl.LSN) []Save {
	n := 0
	for n < len(l.saves) && l.saves[n].LSN <= acked {
		n++
	}
	out := l.saves[:n:n]
	l.saves = l.saves[n:]
	return out
}

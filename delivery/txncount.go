package delivery

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/state"
)

// Feldera may hold records of the stream past the progress row: in a
// transaction a crash left open (some of its POSTs, a prefix of one cut
// short: bodies are fed in chunks, http/input.rs, complete_request), or
// committed without a row (a source transaction cut into parts, a
// joined transaction committed before a retraction or a stop). A replay
// from the row sends them again, which on a keyless table puts them in
// twice. Counting tells them apart. The poster sends one request at a
// time, in source order, so what Feldera holds past the row of a table
// is a prefix of the table's records past it, and a replay from the row
// carries the same records of the table in the same order: they are a
// function of the WAL, except an incremental snapshot's chunks, read
// again differently (a table stops being counted once a chunk of it goes
// out: Uncount), and what a TRUNCATE empties before it is sent (the
// table is not counted again until the next row: Retracted; the replay
// retracts it again anyway). How long that prefix is, /stats says: what
// the table's endpoints took (total_records) since the first POST of it
// past the row. So the fence file keeps, per table, the count just
// before that POST (the window, state.PastRow: Posting), and a session
// that starts from the same row skips the replay's first records of the
// table, as many as the endpoints took since (Skip). Counts are per
// pipeline process: after a restart nothing is skipped.

// window is what Feldera holds past the progress row row.
type window struct {
	row     pglogrepl.LSN
	taken   map[string]uint64 // per table: its count before its first POST past row
	counted string            // the pipeline process of the counts
	dropped map[string]bool   // retracted past row: not counted again in the window
	ours    bool              // this process committed row
}

func (w *window) record() *state.PastRow {
	return &state.PastRow{Row: uint64(w.row), Taken: w.taken, Counted: w.counted}
}

// LeftPast takes over what the previous process counted past the
// progress row (the fence file's record; nil: nothing).
func (x *Transactions) LeftPast(p *state.PastRow) {
	if p != nil {
		x.win = &window{row: pglogrepl.LSN(p.Row), taken: p.Taken, counted: p.Counted}
	}
}

// ForgetPast drops the count past the progress row: a session without
// the table moves the slot past the row, so a replay no longer starts
// there.
func (x *Transactions) ForgetPast() error {
	x.win, x.skip, x.pending = nil, nil, false
	return x.Fence.Past(nil)
}

// Resume starts the session's counting from the progress row it read
// (0: none). fromRow says the replay starts at the row (the slot is not
// past it): only then are the replay's first records past the row the
// ones Feldera holds. The window counted up to now goes on when it is
// past the same row: what Feldera holds past it is read at the first
// POST. Any other starts empty: Feldera holds nothing past a row that a
// crash kept the fence file from recording, since the first POST past
// it comes after the record.
func (x *Transactions) Resume(row pglogrepl.LSN, fromRow bool) error {
	x.skip, x.pending = nil, false
	if fromRow && x.win != nil && x.win.row == row && len(x.win.taken) > 0 {
		x.pending = true
		return nil
	}
	x.win = &window{row: row, ours: x.RowOurs(row)}
	return x.Fence.Past(x.win.record())
}

// Posting is called before a POST of the stream's rows of table. The
// window's first POST of a table records its count; the session's first
// POST reads what Feldera holds past the row (pending).
func (x *Transactions) Posting(ctx context.Context, table string) error {
	w := x.win
	if w == nil || !x.Counted[table] {
		return nil
	}
	if !x.Fence.Taken.Known() || x.pending {
		st, err := x.API.Stats(ctx)
		if err != nil {
			return fmt.Errorf("read what Feldera's ingress endpoints took: %w", err)
		}
		totals := st.IngressTotals()
		if x.pending {
			x.pending = false
			if err := x.held(st.GlobalMetrics.IncarnationUUID, totals); err != nil {
				return err
			}
		}
		x.Fence.Taken.Read(st.GlobalMetrics.IncarnationUUID, totals)
		w = x.win // held may start it again
	}
	if _, ok := w.taken[table]; ok || w.dropped[table] {
		return nil
	}
	n, inc, ok := x.Fence.Taken.Of(table)
	if !ok || w.counted != "" && inc != w.counted {
		return nil
	}
	if w.taken == nil {
		w.taken = map[string]uint64{}
	}
	w.taken[table], w.counted = n, inc
	return x.Fence.Past(w.record())
}

// held sets the skip: what the endpoints took since the window's counts,
// in the same pipeline process. After a restart nothing can be counted:
// the window starts again.
func (x *Transactions) held(incarnation string, totals map[string]uint64) error {
	w := x.win
	if incarnation != w.counted {
		x.Logger.Warn("startup: Feldera restarted since pgfeldera counted what it holds past the progress row: a keyless table may get again rows Feldera kept", "progress_lsn", w.row)
		x.win = &window{row: w.row}
		return x.Fence.Past(x.win.record())
	}
	x.skip = Skip{}
	for table, before := range w.taken {
		if !x.Counted[table] {
			continue // chunks may come in its replay: sent again, as keyed rows may be
		}
		now := totals[table]
		if now < before {
			return fmt.Errorf("Feldera's ingress endpoints of table %s show %d records taken, fewer than the %d the fence file recorded before the first POST past progress row %s in the same pipeline process %s", table, now, before, w.row, incarnation)
		}
		if now > before {
			x.skip[table] = now - before
			x.Logger.Info("startup: Feldera holds records of the replay past the progress row; they are not sent again", "table", table, "records", now-before, "progress_lsn", w.row)
		}
	}
	return nil
}

// RowCommitted starts a new window at row, which a commit just made
// Feldera hold. Records past it Feldera held already (the replay has not
// met them: Skip) stay counted in it.
func (x *Transactions) RowCommitted(row pglogrepl.LSN) error {
	w := &window{row: row, ours: true}
	for table, n := range x.skip {
		count, inc, ok := x.Fence.Taken.Of(table)
		if !ok || count < n || w.counted != "" && inc != w.counted {
			delete(x.skip, table) // cannot be carried: sent again
			continue
		}
		if w.taken == nil {
			w.taken = map[string]uint64{}
		}
		w.taken[table], w.counted = count-n, inc
	}
	x.win = w
	return x.Fence.Past(w.record())
}

// RowOurs reports whether this process committed the progress row at
// row (the last it committed): a position of this history, whatever the
// server's WAL end said when the session began.
func (x *Transactions) RowOurs(row pglogrepl.LSN) bool {
	return x.win != nil && x.win.ours && x.win.row == row
}

// Retracted stops counting table until the next row: a TRUNCATE's
// retraction went out, and what it emptied before sending depends on
// the batches. A replay retracts the table again.
func (x *Transactions) Retracted(table string) error {
	w := x.win
	if w == nil {
		return nil
	}
	delete(x.skip, table)
	if w.dropped == nil {
		w.dropped = map[string]bool{}
	}
	w.dropped[table] = true
	if _, ok := w.taken[table]; !ok {
		return nil
	}
	delete(w.taken, table)
	return x.Fence.Past(w.record())
}

// Uncount stops counting table for the session: a chunk of it goes out
// in the stream, which a replay reads again differently. The window
// drops its count, so a crash sends its records past the row again (a
// keyed table's: upserted again, harmless).
func (x *Transactions) Uncount(table string) error {
	if !x.Counted[table] {
		return nil
	}
	delete(x.Counted, table)
	delete(x.skip, table)
	w := x.win
	if w == nil {
		return nil
	}
	if _, ok := w.taken[table]; !ok {
		return nil
	}
	delete(w.taken, table)
	return x.Fence.Past(w.record())
}

// Skipping reports whether the replay's next records of table may be
// ones Feldera holds (Skip), so that a POST counts its lines only then.
func (x *Transactions) Skipping(table string) bool {
	return x.skip[table] > 0 && x.Counted[table]
}

// Skip is how many of the first lines records of table, about to be
// POSTed, Feldera holds already.
func (x *Transactions) Skip(table string, lines int) int {
	if !x.Counted[table] {
		return 0
	}
	return x.skip.Of(table, lines)
}

// Covered is called before the commit, with the progress row, of a
// transaction a crash or a failure left open and this session joined:
// it holds only records the dead process sent, which all precede the
// join's bound, so the replay met them all; an error names a table
// Feldera holds more of.
func (x *Transactions) Covered() error {
	if x.cur == nil || !x.cur.rejoined {
		return nil
	}
	return x.skip.Rest()
}

// checkTaken compares the counts with a /stats read once every POST of
// the held transaction was answered: a table another client posts to
// cannot be counted, and a crash inside a transaction then sends its
// records of the table again (Taken.Check).
func (x *Transactions) checkTaken(st *feldera.Stats) {
	if len(x.Counted) == 0 {
		return
	}
	if err := x.Fence.Taken.Check(st.GlobalMetrics.IncarnationUUID, st.IngressTotals(), x.Counted); err != nil {
		x.Logger.Warn("flush: "+err.Error()+"; after a crash its rows Feldera holds past the progress row are sent again (duplicates on a keyless table)", "transaction_id", x.cur.id)
	}
}

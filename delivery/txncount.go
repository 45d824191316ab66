package delivery

import (
	"context"
	"fmt"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// A crash inside a Feldera transaction leaves some of its records in
// Feldera, which shows nothing of an open transaction, and a POST cut
// short leaves a prefix of its body (bodies are fed in chunks:
// http/input.rs, complete_request). The next session joins the
// transaction and replays into it (Settle), which on a keyless table
// puts those records in twice. Counting tells them apart. The poster
// sends one request at a time, in source order, so what the transaction
// holds of a table is a prefix of the table's records in it, and a
// replay from the progress row the transaction follows carries the same
// records of the table in the same order: they are a function of the
// WAL, except for an incremental snapshot's chunks, read again
// differently on a replay, so a table stops being counted once a chunk
// of it goes out (Uncount). How long that prefix is,
// /stats says: what the table's endpoints took (total_records) since the
// transaction's first POST to it. So the fence record keeps, per table,
// the count just before that POST (Posting), and the joining session
// skips the replay's first records of the table, as many as the
// endpoints took since (Skip). Counts are per pipeline process: a
// restart drops the open transaction anyway.

// Posting is called before a POST of the stream's rows of table inside
// the held transaction. The transaction's first POST to a table records
// the table's count in the fence record; a joined transaction's first
// POST reads what it holds (Skip).
func (x *Transactions) Posting(ctx context.Context, table string) error {
	t := x.cur
	if t == nil || !x.Counted[table] {
		return nil
	}
	if !x.Fence.Taken.Known() || t.countJoin {
		st, err := x.API.Stats(ctx)
		if err != nil {
			return fmt.Errorf("read what Feldera's ingress endpoints took: %w", err)
		}
		totals := st.IngressTotals()
		if t.countJoin {
			t.countJoin = false
			if err := x.joinCounts(st.GlobalMetrics.IncarnationUUID, totals); err != nil {
				return err
			}
		}
		x.Fence.Taken.Read(st.GlobalMetrics.IncarnationUUID, totals)
	}
	if _, ok := t.taken[table]; ok {
		return nil
	}
	n, inc, ok := x.Fence.Taken.Of(table)
	if !ok || inc != t.incarnation || inc == "" {
		return nil
	}
	if t.taken == nil {
		t.taken = map[string]uint64{}
	}
	t.taken[table], t.counted = n, inc
	return x.Fence.Transaction(t.record())
}

// joinCounts sets what the joined transaction holds of each table it
// counted: what the table's endpoints took since its count, in the same
// pipeline process.
func (x *Transactions) joinCounts(incarnation string, totals map[string]uint64) error {
	t := x.cur
	if incarnation != t.counted {
		return nil // a restart dropped it: Absorbed says so
	}
	t.skip = Skip{}
	for table, before := range t.taken {
		if !x.Counted[table] {
			continue // chunks may come in its replay: sent again, as keyed rows may be
		}
		now := totals[table]
		if now < before {
			return fmt.Errorf("Feldera's ingress endpoints of table %s show %d records taken, fewer than the %d the fence file recorded before transaction %d posted to it in the same pipeline process %s", table, now, before, t.id, incarnation)
		}
		if now > before {
			t.skip[table] = now - before
			x.Logger.Info("startup: the joined Feldera transaction holds records of the replay; they are not sent again", "transaction_id", t.id, "table", table, "records", now-before)
		}
	}
	return nil
}

// Uncount stops counting table for the session: a chunk of it goes out
// in the stream, which a replay reads again differently. The held
// transaction's record drops its count, so a crash sends its records
// of the table again (a keyed table's: upserted again, harmless), and a
// joined transaction skips no more of it.
func (x *Transactions) Uncount(table string) error {
	if !x.Counted[table] {
		return nil
	}
	delete(x.Counted, table)
	t := x.cur
	if t == nil {
		return nil
	}
	delete(t.skip, table)
	if _, ok := t.taken[table]; !ok {
		return nil
	}
	delete(t.taken, table)
	return x.Fence.Transaction(t.record())
}

// Skip is how many of the first lines records of table, about to be
// POSTed in the held transaction, it already holds: sent by the process
// that left it open.
func (x *Transactions) Skip(table string, lines int) int {
	if x.cur == nil || !x.Counted[table] {
		return 0
	}
	return x.cur.skip.Of(table, lines)
}

// Covered is called before the commit of a joined transaction that
// carries the progress row: an error when the transaction holds records
// the replay did not meet (Skip.Rest).
func (x *Transactions) Covered() error {
	if x.cur == nil {
		return nil
	}
	return x.cur.skip.Rest()
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
		x.Logger.Warn("flush: "+err.Error()+"; after a crash inside a Feldera transaction its rows of the table are sent again (duplicates on a keyless table)", "transaction_id", x.cur.id)
	}
}

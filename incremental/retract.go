package incremental

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/snapshot"
)

// retractTable deletes, batch by batch, the keys Feldera holds for t's
// table that Postgres does not.
func (w *Worker) retractTable(ctx context.Context, conn *pgx.Conn, t *Table) error {
	inc := w.H
	rel := t.Rel
	dest := rel.Target.Dest
	var rels []*decode.Rel // the table's sources: a key is absent when none has it
	for _, i := range w.Groups[rel.Target.Route] {
		rels = append(rels, w.Rels[i])
	}
	check, err := snapshot.AbsentCheck(ctx, conn, rels, true)
	if err != nil {
		return err
	}
	sp, err := w.Spool(ctx, "SELECT "+snapshot.SelectList(dest.PrimaryKey)+" FROM "+feldera.SQLIdent(dest.CanonicalName()), dest.Name)
	if err != nil {
		return err
	}
	defer sp.Close()
	var rows [][]byte
	size := 0 // of rows: a batch is bounded like a chunk, in rows and in bytes
	vals := make([][]string, len(rel.KeyCols))
	reply := make(chan bool, 1)
	batch := func(last bool) error {
		if err := w.retractBatch(ctx, conn, t, check, rows, vals, last, reply); err != nil {
			return err
		}
		rows = rows[:0]
		for i := range vals {
			vals[i] = vals[i][:0]
		}
		return nil
	}
	err = sp.Each(func(line []byte) error {
		del, err := snapshot.KeyVals(dest, line, vals)
		if err != nil {
			return err
		}
		rows = append(rows, del)
		size += len(del)
		if len(rows) >= inc.limit || size >= w.MaxBytes {
			size = 0
			return batch(false)
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.Logger.Info("resnapshot: Feldera's keys checked against Postgres", "table", rel.Target.Qualified(), "feldera_table", dest.Name, "keys", sp.Rows)
	return batch(true) // the last batch, even empty, marks the retraction done in order
}

// retractBatch hands the loop one batch of Feldera keys to check (rows,
// and their key values as text), read again until the loop keeps it.
func (w *Worker) retractBatch(ctx context.Context, conn *pgx.Conn, t *Table, check string, rows [][]byte, vals [][]string, last bool, reply chan bool) error {
	for {
		ch, err := w.readRetract(ctx, conn, t, check, rows, vals, last)
		if err != nil {
			return err
		}
		if w.Hooks.Get().RetractRead != nil && len(ch.keyEnds) > 0 {
			w.Hooks.Get().RetractRead(t.Rel.Target.Qualified(), ch.keyList())
		}
		ch.reply = reply
		if err := w.hand(ctx, conn, ch); err != nil {
			return err
		}
		again, err := w.answer(ctx, reply)
		if err != nil || !again {
			return err
		}
	}
}

// readRetract checks one batch of Feldera keys (rows, and their key
// values as text) in its own REPEATABLE READ transaction between
// watermarks: the chunk it returns holds a delete line per key the
// snapshot lacks.
func (w *Worker) readRetract(ctx context.Context, conn *pgx.Conn, t *Table, check string, rows [][]byte, vals [][]string, last bool) (*Chunk, error) {
	ch := &Chunk{Seq: w.H.seq.Add(1), Table: t, Retract: true, Done: last}
	low := w.mark(t, ch.Seq, "low")
	if len(rows) == 0 {
		return ch, w.emitWatermarks(ctx, conn, low)
	}
	name := t.Rel.Target.Qualified()
	tx, snap, err := beginChunk(ctx, conn, fmt.Sprintf("retraction batch %d of %s", ch.Seq, name), []Watermark{low})
	if err != nil {
		return nil, err
	}
	defer tx.end(ctx)
	ch.snap = snap
	// Text results: the keys as Postgres prints them, the form the
	// stream's keys take (decode.KeyText), for the window.
	args := []any{pgx.QueryResultFormats{pgx.TextFormatCode}}
	for i := range vals {
		args = append(args, vals[i])
	}
	res, err := conn.Query(ctx, check, args...)
	if err != nil {
		return nil, fmt.Errorf("retraction batch %d of %s: check keys: %w", ch.Seq, name, err)
	}
	for res.Next() {
		raw := res.RawValues()
		i, err := strconv.Atoi(string(raw[0]))
		if err != nil || i < 1 || i > len(rows) {
			res.Close()
			return nil, fmt.Errorf("retraction batch %d of %s: bad ordinal %q", ch.Seq, name, raw[0])
		}
		ch.Buf = append(ch.Buf, `{"delete":`...)
		ch.Buf = append(ch.Buf, rows[i-1]...)
		ch.Buf = append(ch.Buf, "}\n"...)
		ch.Ends = append(ch.Ends, len(ch.Buf))
		var k []byte
		for j, v := range raw[1:] {
			if j > 0 {
				k = append(k, 0)
			}
			k = append(k, v...)
		}
		ch.addKey(k)
	}
	res.Close()
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("retraction batch %d of %s: check keys: %w", ch.Seq, name, err)
	}
	if err := tx.commit(ctx); err != nil {
		return nil, err
	}
	return ch, nil
}

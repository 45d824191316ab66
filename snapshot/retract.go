package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// retractChunk is how many Feldera keys are checked against Postgres at once.
const retractChunk = 500

func queryHint(err error, table string) error {
	if feldera.IsAdHocQueryError(err) {
		return fatal.Wrap(fmt.Errorf("cannot read the rows of Feldera table %s to retract them: %w (declare a PRIMARY KEY or add WITH ('materialized' = 'true'))", table, err))
	}
	return fmt.Errorf("query feldera table %s: %w", table, err)
}

// retractor batches delete lines for one route and flushes them, waiting
// for completion: a retraction is durable before the position moves.
type retractor struct {
	l       *Loader
	ctx     context.Context
	targets []*decode.Target
	route   int
	b       *delivery.Batch
	n       int
}

func (l *Loader) newRetractor(ctx context.Context, targets []*decode.Target, route int) *retractor {
	b := delivery.NewBatch(len(targets))
	return &retractor{l: l, ctx: ctx, targets: targets, route: route, b: b}
}

func (r *retractor) delete(row json.RawMessage) error {
	buf := &r.b.Bufs[r.route]
	*buf = append(*buf, `{"delete":`...)
	*buf = append(*buf, bytes.TrimSpace(row)...)
	*buf = append(*buf, "}\n"...)
	r.b.Added(r.route, 1, time.Now())
	r.n++
	r.l.Retracted.Add(1)
	if r.l.Bounds.Full(r.b) {
		return r.flush()
	}
	return nil
}

func (r *retractor) flush() error {
	if r.b.Total == 0 {
		return nil
	}
	if err := r.l.Sender.Flush(r.ctx, r.targets, r.b, true); err != nil {
		return err
	}
	crashtest.Point("retract_after_batch")
	r.b.Reset(r.b.Seq + 1)
	return nil
}

func (r *retractor) done(what string) error {
	if err := r.flush(); err != nil {
		return err
	}
	if r.n > 0 {
		r.l.Logger.Info("retract: done", "what", what, "table", r.targets[r.route].Dest.Name, "deletes", r.n)
	}
	crashtest.Point("after_retract")
	return nil
}

// RetractAll deletes every row Feldera holds for a table (TRUNCATE, or a
// keyless table before a resnapshot): by key on a keyed table, by whole
// row on a multiset. The rows are read whole into a spool first (an
// ad-hoc query reads a consistent snapshot of the table), then deleted in
// batches of BATCH_MAX_ROWS, each converted back from what /query prints
// into what ingress takes; the COUNT(*) check catches anything left.
func (l *Loader) RetractAll(ctx context.Context, targets []*decode.Target, rel *decode.Rel) error {
	dest := rel.Target.Dest
	fields := dest.PrimaryKey
	if len(fields) == 0 {
		for _, f := range dest.Fields {
			fields = append(fields, f.CanonicalName())
		}
	}
	sp, err := l.SpoolQuery(ctx, "SELECT "+SelectList(fields)+" FROM "+feldera.SQLIdent(dest.CanonicalName()), dest.Name)
	if err != nil {
		return err
	}
	defer sp.Close()
	r := l.newRetractor(ctx, targets, rel.Target.Route)
	err = sp.Each(func(row []byte) error {
		del, err := dest.IngressRow(row)
		if err != nil {
			return fmt.Errorf("retract from Feldera table %s: %w", dest.Name, err)
		}
		return r.delete(del)
	})
	if err != nil {
		return err
	}
	if err := r.done("all rows"); err != nil {
		return err
	}
	return l.verifyCount(ctx, rel.Target, 0)
}

// absent deletes from Feldera the keys of rows (their values as text in
// vals) that the snapshot does not have: check lists their ordinals.
func (r *retractor) absent(ctx context.Context, conn *pgx.Conn, check string, rel *decode.Rel, rows []json.RawMessage, vals [][]string) error {
	params := make([]any, len(vals))
	for i := range vals {
		params[i] = vals[i]
	}
	res, err := conn.Query(ctx, check, params...)
	if err != nil {
		return fmt.Errorf("check keys of %s against the snapshot: %w", rel.Target.Qualified(), err)
	}
	missing, err := pgx.CollectRows(res, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("check keys of %s against the snapshot: %w", rel.Target.Qualified(), err)
	}
	for _, i := range missing {
		if err := r.delete(rows[i-1]); err != nil {
			return err
		}
	}
	return nil
}

// retractMissing deletes the keys Feldera holds that the snapshot does not:
// rows an earlier attempt made durable and the source deleted since. The
// keys are spooled from Feldera, then checked against Postgres in chunks,
// inside the snapshot transaction, so memory stays bounded and the answer
// is exactly "not in this snapshot".
//
// rels are the sources of one Feldera table (one, or leaf partitions that
// share it, which have the same columns): a key is missing when none of
// them has it.
func (l *Loader) retractMissing(ctx context.Context, conn *pgx.Conn, targets []*decode.Target, rels []*decode.Rel) error {
	rel := rels[0]
	dest := rel.Target.Dest
	check, err := AbsentCheck(ctx, conn, rels, false)
	if err != nil {
		return err
	}
	sp, err := l.SpoolQuery(ctx, "SELECT "+SelectList(dest.PrimaryKey)+" FROM "+feldera.SQLIdent(dest.CanonicalName()), dest.Name)
	if err != nil {
		return err
	}
	defer sp.Close()
	r := l.newRetractor(ctx, targets, rel.Target.Route)
	var rows []json.RawMessage
	vals := make([][]string, len(rel.KeyCols))
	run := func() error {
		if len(rows) == 0 {
			return nil
		}
		if err := r.absent(ctx, conn, check, rel, rows, vals); err != nil {
			return err
		}
		rows = rows[:0]
		for i := range vals {
			vals[i] = vals[i][:0]
		}
		return nil
	}
	err = sp.Each(func(row []byte) error {
		del, err := KeyVals(dest, row, vals)
		if err != nil {
			return err
		}
		rows = append(rows, del)
		if len(rows) >= retractChunk {
			return run()
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := run(); err != nil {
		return err
	}
	return r.done("keys the snapshot does not have")
}

// verifyCount cross-checks Feldera after a snapshot or retraction: with
// the stream paused, a keyed table must hold exactly the rows just copied.
// An empty or wrong answer is never taken on trust.
func (l *Loader) verifyCount(ctx context.Context, t *decode.Target, want int64) error {
	if len(t.Dest.PrimaryKey) == 0 && !t.Dest.Materialized {
		return nil
	}
	var got int64 = -1
	err := l.Sender.Query(ctx, "SELECT COUNT(*) FROM "+feldera.SQLIdent(t.Dest.CanonicalName()), func(row json.RawMessage) error {
		var m map[string]json.Number
		if err := json.Unmarshal(row, &m); err != nil {
			return err
		}
		for _, v := range m {
			n, err := v.Int64()
			if err != nil {
				return err
			}
			got = n
		}
		return nil
	})
	if err != nil {
		return queryHint(err, t.Dest.Name)
	}
	if got != want {
		return fmt.Errorf("cross-check failed: Feldera table %s holds %d rows, expected %d after copying %s", t.Dest.Name, got, want, t.Qualified())
	}
	return nil
}

package snapshot

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/replconn"
)

// CopyAll copies each table through the decoder into batches flushed to
// Feldera (waiting for completion), then retracts leftovers.
func (l *Loader) CopyAll(ctx context.Context, p *catalog.Mapping, snapName string, retract bool) ([]int64, error) {
	conn, err := replconn.Connect(ctx, l.DSN)
	if err != nil {
		return nil, fmt.Errorf("snapshot connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := Begin(ctx, conn, snapName, l.GUCs); err != nil {
		return nil, err
	}
	counts := make([]int64, len(p.Targets))
	b := delivery.NewBatch(len(p.Routes))
	if l.SnapshotTransaction && !retract {
		return l.copyAllInTxn(ctx, conn, p, b, counts)
	}
	if l.SnapshotTransaction {
		l.Logger.Info("snapshot: SNAPSHOT_TRANSACTION applies to a first snapshot only; this resnapshot retracts, batch by batch")
	}
	// Per Feldera table: its sources (one, or the leaf partitions that
	// share it) are copied, then what Feldera holds and none of them has
	// is retracted, and the count is checked against their sum.
	for route, g := range p.Groups {
		t, rels := p.Routes[route], make([]*decode.Rel, len(g))
		for j, i := range g {
			rels[j] = p.Rels[i]
		}
		if retract && !rels[0].Keyed() {
			// A multiset cannot be diffed by key: retract every row first.
			if err := l.RetractAll(ctx, p.Routes, rels[0]); err != nil {
				return nil, err
			}
		}
		var sum int64
		for j, i := range g {
			n, err := l.copyTable(ctx, conn, p.Routes, rels[j], b)
			if err != nil {
				return nil, err
			}
			counts[i] = n
			sum += n
		}
		if retract && rels[0].Keyed() {
			if err := l.retractMissing(ctx, conn, p.Routes, rels); err != nil {
				return nil, err
			}
		}
		if rels[0].Keyed() {
			if err := l.verifyCount(ctx, t, sum); err != nil {
				return nil, err
			}
		}
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return nil, err
	}
	return counts, nil
}

// copyAllInTxn copies every table inside one Feldera transaction
// (SNAPSHOT_TRANSACTION): its batches are POSTed without waiting for
// completion (nothing completes before the commit; Feldera's buffer bound
// still holds, see Transactions.Room), and once all are in, it commits, waits for
// the last token of each table, and cross-checks the counts. Any failure
// commits what was sent (there is no abort) and leaves the state pending:
// the next start resnapshots with retraction.
func (l *Loader) copyAllInTxn(ctx context.Context, conn *pgx.Conn, p *catalog.Mapping, b *delivery.Batch, counts []int64) ([]int64, error) {
	if err := l.Sender.WaitFence(ctx); err != nil {
		return nil, err
	}
	if err := l.Sender.Txns.Release(ctx); err != nil {
		return nil, err
	}
	if err := l.Sender.Txns.Begin(ctx); err != nil {
		l.Sender.AbandonTxn()
		return nil, err
	}
	l.Logger.Info("snapshot: loading every table inside one Feldera transaction (SNAPSHOT_TRANSACTION): nothing is visible until all of it is; Feldera takes no checkpoint meanwhile", "transaction_id", l.Sender.Txns.ID())
	last := map[string]string{} // table → its newest token: it covers the earlier ones
	l.snapTokens = last
	defer func() { l.snapTokens = nil }()
	fail := func(err error) ([]int64, error) {
		l.Sender.AbandonTxn()
		return nil, err
	}
	for i := range p.Targets {
		n, err := l.copyTable(ctx, conn, p.Routes, p.Rels[i], b)
		if err != nil {
			return fail(err)
		}
		counts[i] = n
	}
	if err := l.Sender.Txns.Absorbed(ctx); err != nil {
		return fail(err)
	}
	if err := l.Sender.Txns.Commit(ctx); err != nil {
		return fail(err)
	}
	if err := l.awaitTokens(ctx, last); err != nil {
		return nil, err
	}
	for route, g := range p.Groups {
		var sum int64
		for _, i := range g {
			sum += counts[i]
		}
		if p.Rels[g[0]].Keyed() {
			if err := l.verifyCount(ctx, p.Routes[route], sum); err != nil {
				return nil, err
			}
		}
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return nil, err
	}
	return counts, nil
}

// awaitTokens waits, after the snapshot's Feldera transaction committed,
// for the last token of each table (it covers the earlier ones), and
// raises the step watermark.
func (l *Loader) awaitTokens(ctx context.Context, last map[string]string) error {
	wctx, cancel := context.WithTimeout(ctx, l.Sender.CompletionTimeout)
	defer cancel()
	for table, tok := range last {
		step, err := l.Sender.Sink.WaitCompleteStep(wctx, tok)
		if err != nil {
			return fmt.Errorf("snapshot: wait for completion of %s after the commit: %w", table, err)
		}
		if err := delivery.CheckStep(step, l.Sender.NeedStep(), func() string { return "the snapshot of " + table }); err != nil {
			return err
		}
		l.Sender.RaiseSyncStep(step)
	}
	return nil
}

// flushSnapshotBatch sends a snapshot batch, if it holds rows, and
// empties it: inside the snapshot's Feldera transaction
// (SNAPSHOT_TRANSACTION) without waiting, else waiting for its
// completion.
func (l *Loader) flushSnapshotBatch(ctx context.Context, targets []*decode.Target, b *delivery.Batch) error {
	if b.Total == 0 {
		return nil
	}
	if l.snapTokens != nil {
		if err := l.postSnapshotBatch(ctx, targets, b); err != nil {
			return err
		}
	} else if err := l.Sender.Flush(ctx, targets, b, true); err != nil {
		return err
	}
	crashtest.Point("snapshot_after_batch")
	b.Reset(b.Seq + 1)
	return nil
}

// postSnapshotBatch is a snapshot batch's flush inside the snapshot's
// Feldera transaction: POSTed, not waited for.
func (l *Loader) postSnapshotBatch(ctx context.Context, targets []*decode.Target, b *delivery.Batch) error {
	tokens, _, _, err := l.Sender.Send(ctx, targets, b, delivery.TxnPlan{In: true})
	if err != nil {
		return err
	}
	for _, t := range tokens {
		l.snapTokens[t.Table] = t.Token
	}
	l.Sender.Batches.Add(1)
	return nil
}

func (l *Loader) copyTable(ctx context.Context, conn *pgx.Conn, targets []*decode.Target, rel *decode.Rel, b *delivery.Batch) (int64, error) {
	t := rel.Target
	var estimate float64
	_ = conn.QueryRow(ctx, "SELECT reltuples FROM pg_class WHERE oid = $1::regclass", t.Source()).Scan(&estimate)
	estimated, copied := l.Table(t.Route)
	estimated.Store(int64(estimate))
	cols := make([]string, len(rel.Cols))
	for i, col := range rel.Cols {
		cols[i] = col.Name
	}
	cr := decode.CopyRow{Rel: rel}
	start, lastLog := time.Now(), time.Now()
	var rows int64
	flush := func() error { return l.flushSnapshotBatch(ctx, targets, b) }
	// The clock is read once per 1024 rows: per row it was 8% of the
	// snapshot's CPU, and nothing here needs it finer (snapshot batches
	// flush by size, not by linger).
	now := time.Now()
	n, err := Copy(ctx, conn, SourceOf(t), cols, func(line []byte) error {
		var err error
		if b.Bufs[t.Route], err = cr.AppendInsert(b.Bufs[t.Route], line); err != nil {
			return err
		}
		b.Added(t.Route, 1, now)
		rows++
		l.SnapshotRows.Add(1)
		copied.Add(1)
		if l.Bounds.Full(b) {
			if err := flush(); err != nil {
				return err
			}
		}
		if rows%1024 != 0 {
			return nil
		}
		now = time.Now()
		l.Progress.Store(now.UnixNano())
		if now.Sub(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			l.Logger.Info("snapshot: copying", "table", t.Qualified(), "rows", rows, "estimate", int64(estimate),
				"rows_per_sec", int64(float64(rows)/time.Since(start).Seconds()))
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("snapshot of %s: %w", t.Qualified(), err)
	}
	if err := flush(); err != nil {
		return n, fmt.Errorf("snapshot of %s: %w", t.Qualified(), err)
	}
	l.Logger.Info("snapshot: table copied", "table", t.Qualified(), "rows", n, "seconds", time.Since(start).Round(time.Millisecond).Seconds())
	return n, nil
}

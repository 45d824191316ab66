package connector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/outbox"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/snapshot"
	"github.com/pgfeldera/pgfeldera/state"
)

// startup makes sure the slot exists and the target is seeded before the
// stream starts, following the startup plan.
func (c *Connector) startup(ctx context.Context, p *setup.Plan, rconn *pgconn.PgConn) error {
	if c.cfg.SnapshotMode == SnapshotNever {
		return c.ensureSlot(ctx, rconn)
	}
	st, err := state.Load(c.cfg.StateFile)
	if errors.Is(err, state.ErrNotExist) {
		st = nil
	} else if err != nil {
		return fatal.Wrap(err)
	}
	slot, err := readSlot(ctx, rconn, c.cfg.Slot)
	if err != nil {
		return err
	}
	if slot.Diverged, err = c.failoverChecker().Diverged(ctx, rconn, st, c.srv, c.acked, c.sentHigh); err != nil {
		return err
	}
	mappings := make([]snapshot.Mapping, len(c.cfg.Tables))
	for i, t := range c.cfg.Tables {
		mappings[i] = snapshot.Mapping{Source: t.Schema + "." + t.Name, Dest: t.Dest}
	}
	target := snapshot.Target{DeploymentID: p.DeploymentID, Incarnation: p.Incarnation, FaultTolerant: p.FaultTolerant, NoCheckpoint: p.NoCheckpoint}
	if st != nil && p.FaultTolerant && !c.test.trustRestores {
		if ok, why := setup.RestoredEnough(st.Checkpoint, p.Checkpoints); !ok {
			target.Lost = why
		}
	}
	decision := snapshot.Decide(st, slot, c.cfg.Slot, c.cfg.Publication, mappings, target)
	if decision.Action == snapshot.Stream {
		why, err := c.reconcile(p, st)
		if err != nil {
			return err
		}
		if why == "" {
			c.logger.Info("startup: stream from the slot", "reason", decision.Reason)
			return nil
		}
		decision = snapshot.Plan{Action: snapshot.Resnapshot, Reason: why}
	}
	c.logger.Warn("startup: "+decision.Action.String(), "reason", decision.Reason)
	if c.cfg.SnapshotMode == SnapshotIncremental {
		// A resnapshot too is incremental: a new slot without an exported
		// snapshot, every table read again in chunks while streaming,
		// after a retraction of the rows Feldera holds that Postgres
		// lacks, as `pgfeldera resnapshot` does for one table.
		return c.startIncremental(ctx, p, rconn, mappings, st, slot.Exists, decision.Action == snapshot.Resnapshot && !c.test.noStartRetract)
	}
	return c.snapshot(ctx, p, rconn, st, slot.Exists, decision.Action == snapshot.Resnapshot, mappings)
}

func readSlot(ctx context.Context, rconn *pgconn.PgConn, name string) (snapshot.Slot, error) {
	slot, err := replconn.ReadSlot(ctx, rconn, name)
	return snapshot.Slot{Exists: slot.Exists, WalStatus: slot.WalStatus}, err
}

// snapshot copies every table into Feldera under the new slot's exported
// snapshot, so the stream resumes exactly after what the copy saw. retract
// removes from Feldera what an earlier attempt left that no longer exists.
// The resnapshot requests of old (the state it replaces) are kept, and
// settle with the copy.
func (c *Connector) snapshot(ctx context.Context, p *setup.Plan, rconn *pgconn.PgConn, old *state.State, slotExists, retract bool, mappings []snapshot.Mapping) error {
	st, err := c.pendingState(ctx, p, rconn, old, slotExists, mappings)
	if err != nil {
		return err
	}
	var snapName string
	if c.cfg.SnapshotMode == SnapshotInconsistent {
		c.logger.Warn("SNAPSHOT_MODE=inconsistent: copying BEFORE creating the slot; rows committed in between are LOST. Use only to demonstrate that loss.")
	} else {
		created, err := snapshot.CreateSlot(ctx, rconn, c.cfg.Slot, true, c.srv.Failover)
		if err != nil {
			return err
		}
		snapName = created.SnapshotName
		c.logger.Info("snapshot: created slot with exported snapshot", "consistent_point", created.ConsistentPoint, "snapshot", snapName)
	}
	c.health.snapshotting.Store(true)
	c.health.progress.Store(time.Now().UnixNano())
	counts, err := c.copyAll(ctx, p, snapName, retract)
	c.health.snapshotting.Store(false)
	if err != nil {
		return err
	}
	if c.test.afterCopy != nil {
		c.test.afterCopy()
	}
	if c.cfg.SnapshotMode == SnapshotInconsistent {
		if _, err := snapshot.CreateSlot(ctx, rconn, c.cfg.Slot, false, c.srv.Failover); err != nil {
			return err
		}
	}
	if p.Gate == GateCheckpoint {
		// at_least_once: the copy is durable once a checkpoint covers it;
		// the state file must not say complete before (a Feldera restart
		// would restore a checkpoint without the rows, and the startup
		// would stream on).
		c.logger.Info("snapshot: waiting for a checkpoint to cover the copy (at_least_once)", "step", c.maxStep.Load())
		if err := c.newWatcher(p).AwaitCheckpoint(ctx, c.maxStep.Load()); err != nil {
			return err
		}
		if cps := c.cp.Last.Load(); cps != nil {
			st.Checkpoint = setup.CheckpointRef(*cps) // it holds the copy: a restore must find it, or a later one
		}
	}
	crashtest.Point("snapshot_before_state")
	for i := range st.Tables {
		st.Tables[i].Status = state.Complete
		st.Tables[i].Rows = counts[i]
	}
	st.SettleRequests()
	if err := state.Save(c.cfg.StateFile, st); err != nil {
		return fatal.Wrap(err)
	}
	c.logger.Info("snapshot: complete; streaming from the slot's consistent point")
	return nil
}

// pendingState begins a snapshot of every table, in either mode: a new
// state with every table pending, carrying old's resnapshot requests,
// written before anything else (a crash from here until the state records
// the new slot means "read the tables again", never "stream from a slot
// the state does not know"), then the old slot dropped.
func (c *Connector) pendingState(ctx context.Context, p *setup.Plan, rconn *pgconn.PgConn, old *state.State, slotExists bool, mappings []snapshot.Mapping) (*state.State, error) {
	st := &state.State{Slot: c.cfg.Slot, Publication: c.cfg.Publication, DeploymentID: p.DeploymentID, Incarnation: p.Incarnation, ProgramVersion: p.ProgramVersion}
	for i, m := range mappings {
		st.Tables = append(st.Tables, state.Table{Source: m.Source, Dest: m.Dest, Status: state.Pending, Fingerprint: setup.Fingerprint(p.Targets[i].Dest), Columns: columnsOf(p.Rels[i]), Partitions: p.Leaves[i]})
	}
	st.CarryRequests(old)
	if !c.test.noPendingFirst {
		if err := state.Save(c.cfg.StateFile, st); err != nil {
			return nil, fatal.Wrap(err)
		}
	}
	if slotExists {
		if err := snapshot.DropSlot(ctx, rconn, c.cfg.Slot); err != nil {
			return nil, err
		}
		c.logger.Info("snapshot: dropped the old slot")
	}
	return st, nil
}

// copyAll copies each table through the decoder into batches flushed to
// Feldera (waiting for completion), then retracts leftovers.
func (c *Connector) copyAll(ctx context.Context, p *setup.Plan, snapName string, retract bool) ([]int64, error) {
	conn, err := replconn.Connect(ctx, c.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("snapshot connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := snapshot.Begin(ctx, conn, snapName, pinnedGUCs); err != nil {
		return nil, err
	}
	counts := make([]int64, len(p.Targets))
	b := outbox.NewBatch(len(p.Routes))
	if c.cfg.SnapshotTransaction && !retract {
		return c.copyAllInTxn(ctx, conn, p, b, counts)
	}
	if c.cfg.SnapshotTransaction {
		c.logger.Info("snapshot: SNAPSHOT_TRANSACTION applies to a first snapshot only; this resnapshot retracts, batch by batch")
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
			if err := c.retractAll(ctx, p.Routes, rels[0]); err != nil {
				return nil, err
			}
		}
		var sum int64
		for j, i := range g {
			n, err := c.copyTable(ctx, conn, p.Routes, rels[j], b)
			if err != nil {
				return nil, err
			}
			counts[i] = n
			sum += n
		}
		if retract && rels[0].Keyed() {
			if err := c.retractMissing(ctx, conn, p.Routes, rels); err != nil {
				return nil, err
			}
		}
		if rels[0].Keyed() {
			if err := c.verifyCount(ctx, t, sum); err != nil {
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
func (c *Connector) copyAllInTxn(ctx context.Context, conn *pgx.Conn, p *setup.Plan, b *outbox.Batch, counts []int64) ([]int64, error) {
	if err := c.out.WaitFence(ctx); err != nil {
		return nil, err
	}
	if err := c.txns.Begin(ctx); err != nil {
		c.out.AbandonTxn()
		return nil, err
	}
	c.logger.Info("snapshot: loading every table inside one Feldera transaction (SNAPSHOT_TRANSACTION): nothing is visible until all of it is; Feldera takes no checkpoint meanwhile", "transaction_id", c.txns.ID())
	last := map[string]string{} // table → its newest token: it covers the earlier ones
	c.snapTokens = last
	defer func() { c.snapTokens = nil }()
	fail := func(err error) ([]int64, error) {
		c.out.AbandonTxn()
		return nil, err
	}
	for i := range p.Targets {
		n, err := c.copyTable(ctx, conn, p.Routes, p.Rels[i], b)
		if err != nil {
			return fail(err)
		}
		counts[i] = n
	}
	if err := c.txns.Absorbed(ctx); err != nil {
		return fail(err)
	}
	if err := c.txns.Commit(ctx); err != nil {
		return fail(err)
	}
	wctx, cancel := context.WithTimeout(ctx, c.cfg.CompletionTimeout)
	defer cancel()
	for table, tok := range last {
		step, err := c.sink.WaitCompleteStep(wctx, tok)
		if err != nil {
			return nil, fmt.Errorf("snapshot: wait for completion of %s after the commit: %w", table, err)
		}
		if err := delivery.CheckStep(step, c.Gate() == GateCheckpoint, "the snapshot of "+table); err != nil {
			return nil, err
		}
		outbox.Raise(&c.maxStep, step)
	}
	for route, g := range p.Groups {
		var sum int64
		for _, i := range g {
			sum += counts[i]
		}
		if p.Rels[g[0]].Keyed() {
			if err := c.verifyCount(ctx, p.Routes[route], sum); err != nil {
				return nil, err
			}
		}
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return nil, err
	}
	return counts, nil
}

// flushSnapshotBatch sends a snapshot batch, if it holds rows, and
// empties it: inside the snapshot's Feldera transaction
// (SNAPSHOT_TRANSACTION) without waiting, else waiting for its
// completion.
func (c *Connector) flushSnapshotBatch(ctx context.Context, targets []*decode.Target, b *outbox.Batch) error {
	if b.Total == 0 {
		return nil
	}
	if c.snapTokens != nil {
		if err := c.postSnapshotBatch(ctx, targets, b); err != nil {
			return err
		}
	} else if err := c.out.Flush(ctx, targets, b, true); err != nil {
		return err
	}
	crashtest.Point("snapshot_after_batch")
	b.Reset(b.Seq + 1)
	return nil
}

// postSnapshotBatch is a snapshot batch's flush inside the snapshot's
// Feldera transaction: POSTed, not waited for.
func (c *Connector) postSnapshotBatch(ctx context.Context, targets []*decode.Target, b *outbox.Batch) error {
	tokens, _, _, err := c.out.Send(ctx, targets, b, outbox.TxnPlan{In: true})
	if err != nil {
		return err
	}
	for _, t := range tokens {
		c.snapTokens[t.Table] = t.Token
	}
	c.stats.Batches.Add(1)
	return nil
}

func (c *Connector) copyTable(ctx context.Context, conn *pgx.Conn, targets []*decode.Target, rel *decode.Rel, b *outbox.Batch) (int64, error) {
	t := rel.Target
	var estimate float64
	_ = conn.QueryRow(ctx, "SELECT reltuples FROM pg_class WHERE oid = $1::regclass", t.Source()).Scan(&estimate)
	c.tableStats[t.Route].Estimate.Store(int64(estimate))
	cols := make([]string, len(rel.Cols))
	for i, col := range rel.Cols {
		cols[i] = col.Name
	}
	cr := decode.CopyRow{Rel: rel}
	start, lastLog := time.Now(), time.Now()
	var rows int64
	flush := func() error { return c.flushSnapshotBatch(ctx, targets, b) }
	// The clock is read once per 1024 rows: per row it was 8% of the
	// snapshot's CPU, and nothing here needs it finer (snapshot batches
	// flush by size, not by linger).
	now := time.Now()
	n, err := snapshot.Copy(ctx, conn, snapshot.SourceOf(t), cols, func(line []byte) error {
		var err error
		if b.Bufs[t.Route], err = cr.AppendInsert(b.Bufs[t.Route], line); err != nil {
			return err
		}
		b.Added(t.Route, 1, now)
		rows++
		c.stats.SnapshotRows.Add(1)
		c.tableStats[t.Route].Copied.Add(1)
		if c.bounds().Full(b) {
			if err := flush(); err != nil {
				return err
			}
		}
		if rows%1024 != 0 {
			return nil
		}
		now = time.Now()
		c.health.progress.Store(now.UnixNano())
		if now.Sub(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			c.logger.Info("snapshot: copying", "table", t.Qualified(), "rows", rows, "estimate", int64(estimate),
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
	c.logger.Info("snapshot: table copied", "table", t.Qualified(), "rows", n, "seconds", time.Since(start).Round(time.Millisecond).Seconds())
	return n, nil
}

package connector

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/incsession"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
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
	counts, err := c.loader.CopyAll(ctx, p, snapName, retract)
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
		c.logger.Info("snapshot: waiting for a checkpoint to cover the copy (at_least_once)", "step", c.syncStep.Load())
		if err := c.newWatcher(p).AwaitCheckpoint(ctx, c.syncStep.Load()); err != nil {
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
		st.Tables = append(st.Tables, state.Table{Source: m.Source, Dest: m.Dest, Status: state.Pending, Fingerprint: setup.Fingerprint(p.Targets[i].Dest), Columns: incsession.ColumnsOf(p.Rels[i]), Partitions: p.Leaves[i]})
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

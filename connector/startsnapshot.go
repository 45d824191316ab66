package connector

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/snapshot"
	"github.com/pgfeldera/pgfeldera/state"
)

// snapshot copies every table into Feldera under the new slot's exported
// snapshot, so the stream resumes exactly after what the copy saw. retract
// removes from Feldera what an earlier attempt left that no longer exists.
// The resnapshot requests of old (the state it replaces) are kept, and
// settle with the copy.
func (s *Starter) snapshot(ctx context.Context, p *setup.Plan, rconn *pgconn.PgConn, old *state.State, slotExists, retract bool, mappings []snapshot.Mapping) error {
	st, err := s.pendingState(ctx, p, rconn, old, slotExists, mappings)
	if err != nil {
		return err
	}
	var snapName string
	var consistent pglogrepl.LSN
	if s.Inconsistent {
		s.Logger.Warn("SNAPSHOT_MODE=inconsistent: copying BEFORE creating the slot; rows committed in between are LOST. Use only to demonstrate that loss.")
	} else {
		created, err := s.createSlot(ctx, rconn, true)
		if err != nil {
			return err
		}
		snapName, consistent = created.SnapshotName, created.ConsistentPoint
		s.Logger.Info("snapshot: created slot with exported snapshot", "consistent_point", created.ConsistentPoint, "snapshot", snapName)
	}
	s.Snapshotting.Store(true)
	s.Progress.Store(time.Now().UnixNano())
	counts, err := s.Loader.CopyAll(ctx, &p.Mapping, snapName, retract)
	s.Snapshotting.Store(false)
	if err != nil {
		return err
	}
	if s.Hooks.AfterCopy != nil {
		s.Hooks.AfterCopy()
	}
	if s.Inconsistent {
		if _, err := s.createSlot(ctx, rconn, false); err != nil {
			return err
		}
	}
	if err := s.copiedTo(ctx, st, consistent); err != nil {
		return err
	}
	if p.Gate == delivery.GateCheckpoint {
		// at_least_once: the copy is durable once a checkpoint covers it;
		// the state file must not say complete before (a Feldera restart
		// would restore a checkpoint without the rows, and the startup
		// would stream on).
		s.Logger.Info("snapshot: waiting for a checkpoint to cover the copy (at_least_once)", "step", s.Loader.Sender.SyncStep())
		if err := s.Watcher(p).AwaitCheckpoint(ctx, s.Loader.Sender.SyncStep()); err != nil {
			return err
		}
		if cps := s.CP.Last.Load(); cps != nil {
			st.Checkpoint = setup.CheckpointRef(*cps) // it holds the copy: a restore must find it, or a later one
		}
	}
	crashtest.Point("snapshot_before_state")
	for i := range st.Tables {
		st.Tables[i].Status = state.Complete
		st.Tables[i].Rows = counts[i]
	}
	st.SettleRequests()
	if err := state.Save(s.StateFile, st); err != nil {
		return fatal.Wrap(err)
	}
	s.Logger.Info("snapshot: complete; streaming from the slot's consistent point")
	return nil
}

// pendingState begins a snapshot of every table, in either mode: a new
// state with every table pending, carrying old's resnapshot requests,
// written before anything else (a crash from here until the state records
// the new slot means "read the tables again", never "stream from a slot
// the state does not know"), then the old slot dropped.
func (s *Starter) pendingState(ctx context.Context, p *setup.Plan, rconn *pgconn.PgConn, old *state.State, slotExists bool, mappings []snapshot.Mapping) (*state.State, error) {
	st := &state.State{Slot: s.Slot, Publication: s.Publication, DeploymentID: p.DeploymentID, Incarnation: p.Incarnation, ProgramVersion: p.ProgramVersion}
	for i, m := range mappings {
		st.Tables = append(st.Tables, state.Table{Source: m.Source, Dest: m.Dest, Status: state.Pending, Fingerprint: setup.Fingerprint(p.Targets[i].Dest), Columns: incremental.ColumnsOf(p.Rels[i]), Partitions: p.Leaves[i]})
	}
	st.CarryRequests(old)
	if !s.Hooks.NoPendingFirst {
		if err := state.Save(s.StateFile, st); err != nil {
			return nil, fatal.Wrap(err)
		}
	}
	if slotExists {
		if err := replconn.DropSlot(ctx, rconn, s.Slot); err != nil {
			return nil, err
		}
		s.Logger.Info("snapshot: dropped the old slot")
	}
	return st, nil
}

package connector

import (
	"context"
	"errors"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/snapshot"
	"github.com/pgfeldera/pgfeldera/state"
)

// startup makes sure the slot exists and the target is seeded before the
// stream starts, following the startup plan.
func (s *Starter) startup(ctx context.Context, p *setup.Plan, rconn *pgconn.PgConn) error {
	if s.Never {
		return s.ensureSlot(ctx, rconn)
	}
	st, err := state.Load(s.StateFile)
	if errors.Is(err, state.ErrNotExist) {
		st = nil
	} else if err != nil {
		return fatal.Wrap(err)
	}
	slot, confirmed, err := readSlot(ctx, rconn, s.Slot)
	if err != nil {
		return err
	}
	if slot.Diverged, err = s.failoverChecker().Diverged(ctx, rconn, st, s.srv, s.Acked, s.SentHigh, s.heldBefore); err != nil {
		return err
	}
	mappings := make([]snapshot.Mapping, len(s.Tables))
	for i, t := range s.Tables {
		mappings[i] = snapshot.Mapping{Source: t.Schema + "." + t.Name, Dest: t.Dest}
	}
	target := snapshot.Target{DeploymentID: p.DeploymentID, Incarnation: p.Incarnation, FaultTolerant: p.FaultTolerant, NoCheckpoint: p.NoCheckpoint}
	if st != nil && p.FaultTolerant && !s.Hooks.TrustRestores {
		if ok, why := setup.RestoredEnough(st.Checkpoint, p.Checkpoints); !ok {
			target.Lost = why
		}
	}
	if target.Lost == "" && st != nil && slot.Exists {
		if target.Lost, err = s.progressLost(ctx, st, confirmed); err != nil {
			return err
		}
	}
	decision := snapshot.Decide(st, slot, s.Slot, s.Publication, mappings, target)
	if decision.Action == snapshot.Stream {
		why, err := s.reconcile(p, st)
		if err != nil {
			return err
		}
		if why == "" {
			s.Logger.Info("startup: stream from the slot", "reason", decision.Reason)
			return nil
		}
		decision = snapshot.Plan{Action: snapshot.Resnapshot, Reason: why}
	}
	s.Logger.Warn("startup: "+decision.Action.String(), "reason", decision.Reason)
	if s.Incremental {
		// A resnapshot too is incremental: a new slot without an exported
		// snapshot, every table read again in chunks while streaming,
		// after a retraction of the rows Feldera holds that Postgres
		// lacks, as `pgfeldera resnapshot` does for one table.
		return s.startIncremental(ctx, p, rconn, mappings, st, slot.Exists, decision.Action == snapshot.Resnapshot && !s.Hooks.NoStartRetract)
	}
	return s.snapshot(ctx, p, rconn, st, slot.Exists, decision.Action == snapshot.Resnapshot, mappings)
}

// readSlot reads the slot as Decide sees it, and its confirmed position.
func readSlot(ctx context.Context, rconn *pgconn.PgConn, name string) (snapshot.Slot, pglogrepl.LSN, error) {
	slot, err := replconn.ReadSlot(ctx, rconn, name)
	return snapshot.Slot{Exists: slot.Exists, WalStatus: slot.WalStatus}, slot.Confirmed, err
}

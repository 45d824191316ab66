package connector

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/state"
)

// The progress row (delivery.Progress) holds a position in the history of
// the slot that wrote it. A session skips what lies below it, so a slot
// with another history must never meet it: a new slot (a snapshot, a
// resnapshot, a slot created for SNAPSHOT_MODE=never) starts at its
// consistent point, which may lie below the row after a failover (a fork
// before the row's position); and a promoted standby's positions past the
// fork are not the old primary's. So the row is cleared (set to 0: skip
// nothing) before a slot is created, and when the server is not the one
// the state file last recorded. Cleared first, a crash anywhere after
// leaves a row that skips nothing; the stream's first Feldera
// transaction writes it again.

// createSlot clears the progress row, then creates the session's slot
// (export: with an exported snapshot).
func (s *Starter) createSlot(ctx context.Context, conn *pgconn.PgConn, export bool) (replconn.Created, error) {
	if s.ResetProgress != nil {
		if err := s.ResetProgress(ctx, 0); err != nil {
			return replconn.Created{}, fmt.Errorf("clear the progress row before creating slot %s: %w", s.Slot, err)
		}
		s.Logger.Info("progress: cleared the progress row: a new slot starts another history")
	}
	return replconn.CreateSlot(ctx, conn, s.Slot, export, s.srv.Failover)
}

// serverMoved clears the progress row when the state file last recorded
// another server or timeline (a failover): the row may hold a position
// of the old history. What it held is kept first (heldBefore): Feldera
// holds the old history up to there, and a fork before it means rows the
// new primary never had (failover.Checker.Diverged), which a process
// that sent nothing before the failover knows only from the row.
func (s *Starter) serverMoved(ctx context.Context) error {
	s.heldBefore = 0
	if s.ResetProgress == nil {
		return nil
	}
	st, err := state.Load(s.StateFile)
	if err != nil || st.SystemID == "" || st.SystemID == s.srv.SystemID && st.Timeline == s.srv.Timeline {
		return nil // no state (a new slot clears the row), or the same server
	}
	if s.ReadProgress != nil {
		held, _, err := s.ReadProgress(ctx)
		if err != nil {
			return fmt.Errorf("read the progress row after a change of server: %w", err)
		}
		s.heldBefore = held
	}
	if st.ProgressKept {
		// A cleared row is below the slot: the state must not say the
		// slot never passes it (setup.ProgressLost).
		st.ProgressKept = false
		if err := state.Save(s.StateFile, st); err != nil {
			return fatal.Wrap(err)
		}
	}
	if err := s.ResetProgress(ctx, 0); err != nil {
		return fmt.Errorf("clear the progress row after a change of server (system %s timeline %d → %s timeline %d): %w", st.SystemID, st.Timeline, s.srv.SystemID, s.srv.Timeline, err)
	}
	s.Logger.Info("progress: the server changed since the state file's last session (a failover): cleared the progress row", "system_identifier", s.srv.SystemID, "timeline", s.srv.Timeline)
	return nil
}

// progressLost reads the progress row when the state says the slot never
// passes it, and says why Feldera lost acknowledged data ("" when the row
// holds the slot's confirmed position; setup.ProgressLost). Every other
// check of what Feldera restored has passed. A row missing under another
// definition of the progress table than the one the state recorded was
// emptied by Feldera itself (a program change starts a modified table
// empty, modifying.md): nothing else was lost, so the row is written
// again at the slot's position. (A row present and behind is no table
// emptied: still lost.) The state then records the table's definition.
func (s *Starter) progressLost(ctx context.Context, st *state.State, confirmed pglogrepl.LSN) (string, error) {
	if s.ReadProgress == nil || !st.ProgressKept || s.Hooks.TrustProgress {
		return "", nil
	}
	row, found, err := s.ReadProgress(ctx)
	if err != nil {
		return "", fmt.Errorf("read the progress row: %w", err)
	}
	why := setup.ProgressLost(st.ProgressKept, s.Slot, row, found, confirmed)
	if why != "" && (found || st.ProgressFingerprint == "" || st.ProgressFingerprint == s.ProgressFingerprint) {
		return why, nil
	}
	if why != "" {
		s.Logger.Warn("startup: the definition of the progress table changed, and Feldera started it empty (a program change): writing the row again at the slot's position; no other table lost anything",
			"table", setup.ProgressTable, "confirmed_flush_lsn", confirmed)
		if err := s.ResetProgress(ctx, confirmed); err != nil {
			return "", fmt.Errorf("write the progress row again at %s after the progress table changed: %w", confirmed, err)
		}
	}
	if st.ProgressFingerprint != s.ProgressFingerprint {
		st.ProgressFingerprint = s.ProgressFingerprint
		if err := state.Save(s.StateFile, st); err != nil {
			return "", fatal.Wrap(err)
		}
	}
	return "", nil
}

// copiedTo writes, with the progress table, the row at the slot's
// consistent point once the copy is in (the copy holds the source as of
// it, and the slot streams only what commits after it), and marks the
// state that the slot keeps behind the row from here
// (state.State.ProgressKept): the state file says complete only after,
// so a restart that finds the snapshot complete and the row missing or
// behind knows Feldera lost it. The row's step joins the copy's, so
// under at_least_once the checkpoint the snapshot waits for holds it too.
// An inconsistent snapshot (no consistent point) writes none.
func (s *Starter) copiedTo(ctx context.Context, st *state.State, consistent pglogrepl.LSN) error {
	if s.ResetProgress == nil || consistent == 0 {
		return nil
	}
	if err := s.ResetProgress(ctx, consistent); err != nil {
		return fmt.Errorf("write the progress row at the snapshot's consistent point %s: %w", consistent, err)
	}
	st.ProgressKept, st.ProgressFingerprint = true, s.ProgressFingerprint
	return nil
}

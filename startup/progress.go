package startup

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/snapshot"
	"github.com/pgfeldera/pgfeldera/state"
)

// The progress row (outbox.Progress) holds a position in the history of
// the slot that wrote it. A session skips what lies below it, so a slot
// with another history must never meet it: a new slot (a snapshot, a
// resnapshot, a slot created for SNAPSHOT_MODE=never) starts at its
// consistent point, which may lie below the row after a failover (a fork
// before the row's position) even on the same server; and a promoted
// standby's positions past the fork are not the old primary's. So the
// row is reset to the new slot's start right after the slot is created,
// before the state file records the slot, and to the slot's confirmed
// position when the server is not the one the state file last recorded:
// a crash in between finds the same reason again at the next start.

// createSlot creates the session's slot (export: with an exported
// snapshot) and resets the progress row to its consistent point.
func (s *Starter) createSlot(ctx context.Context, conn *pgconn.PgConn, export bool) (snapshot.Created, error) {
	created, err := snapshot.CreateSlot(ctx, conn, s.Slot, export, s.srv.Failover)
	if err != nil || s.ResetProgress == nil {
		return created, err
	}
	if err := s.ResetProgress(ctx, created.ConsistentPoint); err != nil {
		return created, fmt.Errorf("reset the progress row to the new slot's start %s: %w", created.ConsistentPoint, err)
	}
	s.Logger.Info("progress: the progress row starts at the new slot's consistent point", "lsn", created.ConsistentPoint)
	return created, nil
}

// serverMoved resets the progress row to the slot's confirmed position
// when the state file last recorded another server or timeline (a
// failover): the row may hold a position of the old history.
func (s *Starter) serverMoved(ctx context.Context, conn *pgconn.PgConn) error {
	if s.ResetProgress == nil {
		return nil
	}
	st, err := state.Load(s.StateFile)
	if err != nil || st.SystemID == "" || st.SystemID == s.srv.SystemID && st.Timeline == s.srv.Timeline {
		return nil // no state (its start resets on creating the slot), or the same server
	}
	slot, err := replconn.ReadSlot(ctx, conn, s.Slot)
	if err != nil || !slot.Exists {
		return err // a missing slot is created, and the row reset, by the startup plan
	}
	if err := s.ResetProgress(ctx, slot.Confirmed); err != nil {
		return fmt.Errorf("reset the progress row after a change of server (system %s timeline %d → %s timeline %d): %w", st.SystemID, st.Timeline, s.srv.SystemID, s.srv.Timeline, err)
	}
	s.Logger.Info("progress: the server changed since the state file's last session (a failover): the progress row is reset to the slot's confirmed position", "lsn", slot.Confirmed)
	return nil
}

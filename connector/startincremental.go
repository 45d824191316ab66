package connector

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/snapshot"
	"github.com/pgfeldera/pgfeldera/state"
)

// startIncremental writes the first run of an incremental snapshot: the
// slot without an exported snapshot (nothing pins xmin), then the state
// with every table incremental from its beginning. Tables that cannot be
// chunked are refused before anything is created.
//
// It first records every table as pending, so that a crash before the
// state records the new slot decides a resnapshot again; a resnapshot
// (retract: Feldera may hold rows Postgres no longer has) then drops the
// old slot (slotExists), creates the new one, and records every table as
// incremental with its retraction to do: the worker deletes, batch by
// batch, the keys Feldera holds and Postgres lacks, then reads the table
// in chunks, as for a `pgfeldera resnapshot` request
// (incremental/resnapshot.go).
// The resnapshot requests of old (the state replaced) are kept.
func (s *Starter) startIncremental(ctx context.Context, p *setup.Plan, rconn *pgconn.PgConn, mappings []snapshot.Mapping, old *state.State, slotExists, retract bool) error {
	if err := incremental.Prepare(ctx, s.DSN, &p.Mapping, &s.spare); err != nil {
		return err
	}
	// Requests carried from old settle as the tables complete (incremental.Session.Save).
	st, err := s.pendingState(ctx, p, rconn, old, slotExists, mappings)
	if err != nil {
		return err
	}
	created, err := s.createSlot(ctx, rconn, false)
	if err != nil {
		return err
	}
	if s.Hooks.FailAfterSlot {
		return fatal.Wrap(errors.New("test hook: stopped after creating the slot, before the state records it"))
	}
	for i := range st.Tables {
		st.Tables[i].Status, st.Tables[i].Retract = state.Incremental, retract
	}
	// The slot is this server's: recorded in this write, so that
	// recordServer has none of its own to do.
	st.SystemID, st.Timeline = s.srv.SystemID, s.srv.Timeline
	if err := state.Save(s.StateFile, st); err != nil {
		return fatal.Wrap(err)
	}
	s.Logger.Info("snapshot: incremental: created the slot without an exported snapshot; streaming, and reading the tables in chunks meanwhile",
		"consistent_point", created.ConsistentPoint, "chunk_rows", incremental.ChunkRows(s.ChunkRows), "retract_first", retract)
	return nil
}

package connector

import (
	"slices"
	"strings"
	"time"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/state"
)

// chunkSaveEvery is how often the state file is written while chunks
// complete: a crash re-reads the chunks of at most this long (resuming
// from an older position is safe: the chunks after it are read again and
// their rows upserted), and writing and fsyncing the file per chunk cost
// about 6 % of an incremental snapshot's rate (the in-process benchmark).
const chunkSaveEvery = 200 * time.Millisecond

// saveChunks records in the state each chunk the acknowledged position
// passed, in order, and logs the progress. The file is written when a
// table's read or retraction is done, on force (a graceful stop), and
// otherwise at most every chunkSaveEvery.
func (s *stream) saveChunks(force bool) error {
	inc := s.inc
	for _, sv := range inc.loop.Due(s.c.acked) {
		t := &inc.st.Tables[sv.Table.Idx]
		if sv.Retract {
			t.Retracted += sv.Rows
			if !sv.Done {
				continue
			}
			t.Retract = false
			if err := s.writeChunks(); err != nil {
				return err
			}
			s.logger.Info("resnapshot: retraction done; reading the chunks", "table", t.Source, "deleted", t.Retracted)
			continue
		}
		done := recordChunk(t, sv)
		ts := s.c.tableStats[sv.Table.Rel.Target.Route]
		if ts.ChunksDone.Add(1) >= ts.ChunksTotal.Load() && !done {
			ts.ChunksTotal.Add(1) // more rows than the estimate
		}
		inc.unsaved++
		if done {
			s.tableRead(t, sv.Table)
			if err := s.writeChunks(); err != nil {
				return err
			}
		}
		s.progress(sv, t, done)
	}
	if inc.unsaved > 0 && (force || time.Since(inc.savedAt) >= chunkSaveEvery) {
		return s.writeChunks()
	}
	return nil
}

// recordChunk records a chunk the acknowledged position passed in its
// table's state: the rows, the block plan when it is new, where its lane
// goes on. It reports whether the table is read whole.
func recordChunk(t *state.Table, sv incremental.Save) bool {
	t.Chunks++
	t.Copied += sv.Rows
	done := sv.Done
	if b := sv.Table.Blocks; b != nil && (t.Blocks == nil || *t.Blocks != *b) {
		// The worker's block plan is new (the first, or after a
		// rewrite): it replaces the state's, with its lanes.
		t.Blocks, t.After, t.Lanes = &state.Blocks{Filenode: b.Filenode, End: b.End}, nil, nil
	}
	if len(t.Lanes) == 0 && len(sv.Table.Plan) > 1 {
		t.Lanes = slices.Clone(sv.Table.Plan)
	}
	if len(t.Lanes) > 0 {
		l := &t.Lanes[sv.Lane]
		if sv.Last != nil {
			l.After = sv.Last
		}
		l.Done = l.Done || sv.Done
		done = !slices.ContainsFunc(t.Lanes, func(l state.Lane) bool { return !l.Done })
	} else if sv.Last != nil {
		t.After = sv.Last
	}
	return done
}

// tableRead marks a table read whole in the state, and settles the
// resnapshot requests it finishes.
func (s *stream) tableRead(t *state.Table, ct *incremental.Table) {
	inc := s.inc
	t.Status, t.After, t.Lanes, t.Blocks, t.Rows = state.Complete, nil, nil, nil, t.Copied
	inc.tables = slices.DeleteFunc(inc.tables, func(x *incremental.Table) bool { return x == ct })
	before := doneRequests(inc.st)
	inc.st.SettleRequests()
	for _, r := range inc.st.Requests {
		if r.Done && !before[r.ID] {
			s.logger.Info("resnapshot: request done; its tables are exact in Feldera", "id", r.ID, "tables", strings.Join(r.Tables, ","))
		}
	}
}

// writeChunks writes the state file with the chunks recorded since it was
// last written; each is then durable and recorded (the crash point).
func (s *stream) writeChunks() error {
	inc := s.inc
	if err := state.Save(s.c.cfg.StateFile, inc.st); err != nil {
		return fatal(err)
	}
	inc.savedAt = time.Now()
	for ; inc.unsaved > 0; inc.unsaved-- {
		crashtest.Point("snapshot_after_chunk")
	}
	return nil
}

func doneRequests(st *state.State) map[string]bool {
	m := map[string]bool{}
	for _, r := range st.Requests {
		if r.Done {
			m[r.ID] = true
		}
	}
	return m
}

func (s *stream) progress(sv incremental.Save, t *state.Table, done bool) {
	inc := s.inc
	route := sv.Table.Rel.Target.Route
	if done {
		s.logger.Info("snapshot: incremental: table read", "table", t.Source, "chunks", t.Chunks, "rows", t.Copied, "chunks_read_again", inc.retries)
		if !inc.st.Incremental() {
			s.logger.Info("snapshot: incremental: complete; every table is exact in Feldera", "seconds", time.Since(inc.started).Round(time.Millisecond).Seconds())
		}
		return
	}
	if time.Since(inc.lastLog) < 5*time.Second {
		return
	}
	inc.lastLog = time.Now()
	estimate := s.c.tableStats[route].Estimate.Load()
	rate := float64(sv.Table.Copied) / time.Since(inc.started).Seconds()
	args := []any{"table", t.Source, "chunks", t.Chunks, "rows", t.Copied, "estimate", estimate, "rows_per_sec", int64(rate)}
	if rate > 0 && estimate > t.Copied {
		args = append(args, "eta", (time.Duration(float64(estimate-t.Copied)/rate) * time.Second).Round(time.Second).String())
	}
	s.logger.Info("snapshot: incremental: copying", args...)
}

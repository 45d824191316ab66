package incremental

import (
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/state"
)

// SaveEvery is how often the state file is written while chunks
// complete: a crash re-reads the chunks of at most this long (resuming
// from an older position is safe: the chunks after it are read again and
// their rows upserted), and writing and fsyncing the file per chunk cost
// about 6 % of an incremental snapshot's rate (the in-process benchmark).
const SaveEvery = 200 * time.Millisecond

// Progress is a table's snapshot progress, for the metrics: the estimate
// of its rows, and its chunks done (durable, recorded) and done plus the
// estimate of those left (0 when none runs). Safe for concurrent use.
type Progress struct {
	Estimate                atomic.Int64 // pg_class.reltuples at the last snapshot
	ChunksDone, ChunksTotal atomic.Int64
}

// Recorder records the chunks the acknowledged position passed in the
// state file, in order, and logs the progress. It is the stream loop's:
// not safe for concurrent use.
type Recorder struct {
	St        *state.State
	StateFile string
	Logger    *slog.Logger
	// Progress is the progress of the Feldera table a route feeds.
	Progress func(route int) *Progress
	// Retries counts the chunks read again (the loop's).
	Retries int

	// unsaved is how many chunks the state records in memory and not yet
	// in its file; savedAt is when the file was last written.
	unsaved int
	savedAt time.Time
	started time.Time
	lastLog time.Time
}

// NewRecorder records into st, which StateFile holds.
func NewRecorder(st *state.State, stateFile string, logger *slog.Logger, progress func(route int) *Progress) *Recorder {
	now := time.Now()
	return &Recorder{St: st, StateFile: stateFile, Logger: logger, Progress: progress, started: now, lastLog: now}
}

// Save records due, the chunks the acknowledged position passed, in
// order. The file is written when a table's read or retraction is done,
// on force (a graceful stop), and otherwise at most every SaveEvery. It
// returns the tables read whole.
func (r *Recorder) Save(due []Save, force bool) (read []*Table, err error) {
	for _, sv := range due {
		t := &r.St.Tables[sv.Table.Idx]
		if sv.Retract {
			t.Retracted += sv.Rows
			if !sv.Done {
				continue
			}
			t.Retract = false
			if err := r.Write(); err != nil {
				return read, err
			}
			r.Logger.Info("resnapshot: retraction done; reading the chunks", "table", t.Source, "deleted", t.Retracted)
			continue
		}
		done := recordChunk(t, sv)
		ts := r.Progress(sv.Table.Rel.Target.Route)
		if ts.ChunksDone.Add(1) >= ts.ChunksTotal.Load() && !done {
			ts.ChunksTotal.Add(1) // more rows than the estimate
		}
		r.unsaved++
		if done {
			r.tableRead(t)
			read = append(read, sv.Table)
			if err := r.Write(); err != nil {
				return read, err
			}
		}
		r.progress(sv, t, done)
	}
	if r.unsaved > 0 && (force || time.Since(r.savedAt) >= SaveEvery) {
		return read, r.Write()
	}
	return read, nil
}

// recordChunk records a chunk the acknowledged position passed in its
// table's state: the rows, the block plan when it is new, where its lane
// goes on. It reports whether the table is read whole.
func recordChunk(t *state.Table, sv Save) bool {
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
func (r *Recorder) tableRead(t *state.Table) {
	t.Status, t.After, t.Lanes, t.Blocks, t.Rows = state.Complete, nil, nil, nil, t.Copied
	before := doneRequests(r.St)
	r.St.SettleRequests()
	for _, req := range r.St.Requests {
		if req.Done && !before[req.ID] {
			r.Logger.Info("resnapshot: request done; its tables are exact in Feldera", "id", req.ID, "tables", strings.Join(req.Tables, ","))
		}
	}
}

// Write writes the state file with the chunks recorded since it was
// last written; each is then durable and recorded (the crash point).
func (r *Recorder) Write() error {
	if err := state.Save(r.StateFile, r.St); err != nil {
		return fatal.Wrap(err)
	}
	r.savedAt = time.Now()
	for ; r.unsaved > 0; r.unsaved-- {
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

// progress logs a table read whole, or, every 5 s, how far its read got.
func (r *Recorder) progress(sv Save, t *state.Table, done bool) {
	route := sv.Table.Rel.Target.Route
	if done {
		r.Logger.Info("snapshot: incremental: table read", "table", t.Source, "chunks", t.Chunks, "rows", t.Copied, "chunks_read_again", r.Retries)
		if !r.St.Incremental() {
			r.Logger.Info("snapshot: incremental: complete; every table is exact in Feldera", "seconds", time.Since(r.started).Round(time.Millisecond).Seconds())
		}
		return
	}
	if time.Since(r.lastLog) < 5*time.Second {
		return
	}
	r.lastLog = time.Now()
	estimate := r.Progress(route).Estimate.Load()
	rate := float64(sv.Table.Copied) / time.Since(r.started).Seconds()
	args := []any{"table", t.Source, "chunks", t.Chunks, "rows", t.Copied, "estimate", estimate, "rows_per_sec", int64(rate)}
	if rate > 0 && estimate > t.Copied {
		args = append(args, "eta", (time.Duration(float64(estimate-t.Copied)/rate) * time.Second).Round(time.Second).String())
	}
	r.Logger.Info("snapshot: incremental: copying", args...)
}

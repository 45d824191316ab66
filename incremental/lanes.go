package incremental

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/snapshot"
	"github.com/pgfeldera/pgfeldera/state"
)

// planLanes is how t is read: in block ranges (planBlocks) when it can
// be, else in key ranges (planKeyLanes): the lanes the state lists (those
// not done), else, for a table not begun and SNAPSHOT_PARALLELISM above 1,
// lanes cut at the histogram of its first key column, else one lane from
// its After.
func (w *Worker) planLanes(ctx context.Context, conn *pgx.Conn, t *Table) ([]*laneRun, error) {
	runs, ok, err := w.planBlocks(ctx, conn, t)
	if err != nil || ok {
		return runs, err
	}
	return w.planKeyLanes(ctx, conn, t)
}

// resumeBlocks is the state's block plan of a table that still has the
// relfilenode it was planned for: its lanes not yet done, each from where
// it got to.
func (w *Worker) resumeBlocks(st *state.Table) ([]*laneRun, error) {
	if len(st.Lanes) == 0 {
		return []*laneRun{{after: st.After, reply: make(chan bool, 4), blocks: true, to: st.Blocks.End}}, nil
	}
	var runs []*laneRun
	for i, l := range st.Lanes {
		if l.Done {
			continue
		}
		r := &laneRun{idx: i, after: l.After, reply: make(chan bool, 4), blocks: true}
		var err error
		if r.from, err = parseBlock(l.Lo); err == nil {
			r.to, err = parseBlock(l.Hi)
		}
		if err != nil {
			return nil, fatal.Wrap(fmt.Errorf("state file %s: table %s: lane %d: %w", w.StateFile, st.Source, i, err))
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// planBlocks plans an ordinary table's read in block ranges: the state's
// plan when the table still has its relfilenode, else a new one from its
// first block, cut into SNAPSHOT_PARALLELISM lanes of equal size. ok is
// false for a table read in key ranges: a partitioned one (its leaves
// have block numbers of their own), or one whose key-range read the state
// records as begun.
func (w *Worker) planBlocks(ctx context.Context, conn *pgx.Conn, t *Table) ([]*laneRun, bool, error) {
	st := t.Start
	if w.Hooks.Get().ChunkByKey || (st.Blocks == nil && (st.After != nil || len(st.Lanes) > 0)) {
		return nil, false, nil
	}
	var (
		kind     string
		filenode uint32
		end      int64
	)
	err := conn.QueryRow(ctx, `SELECT c.relkind::text, coalesce(pg_relation_filenode(c.oid), 0::oid),
		pg_relation_size(c.oid) / current_setting('block_size')::int8
		FROM pg_class c WHERE c.oid = $1::regclass`, t.Rel.Target.Source()).Scan(&kind, &filenode, &end)
	if err != nil {
		return nil, false, fmt.Errorf("read the size of %s: %w", t.Rel.Target.Qualified(), err)
	}
	if kind != "r" {
		return nil, false, nil
	}
	if st.Blocks != nil && st.Blocks.Filenode == filenode {
		t.Blocks = &state.Blocks{Filenode: st.Blocks.Filenode, End: st.Blocks.End}
		runs, err := w.resumeBlocks(&st)
		return runs, err == nil, err
	}
	if st.Blocks != nil {
		w.Logger.Warn("snapshot: incremental: the table was rewritten (a TRUNCATE, VACUUM FULL, CLUSTER, a rewriting ALTER TABLE) since its read in block ranges began: reading it again from its first block",
			"table", t.Rel.Target.Qualified(), "relfilenode", filenode, "planned_relfilenode", st.Blocks.Filenode)
	}
	if end > math.MaxUint32 {
		return nil, false, fmt.Errorf("%s has %d blocks: more than a block number holds", t.Rel.Target.Qualified(), end)
	}
	t.Blocks = &state.Blocks{Filenode: filenode, End: uint32(end)}
	t.Plan = nil
	cuts := snapshot.BlockLanes(uint32(end), w.H.lanes)
	runs := make([]*laneRun, len(cuts))
	for i, c := range cuts {
		runs[i] = &laneRun{idx: i, reply: make(chan bool, 4), blocks: true, from: c[0], to: c[1]}
		if len(cuts) > 1 {
			lo, hi := strconv.FormatUint(uint64(c[0]), 10), strconv.FormatUint(uint64(c[1]), 10)
			t.Plan = append(t.Plan, state.Lane{Lo: &lo, Hi: &hi})
		}
	}
	if len(runs) > 1 {
		w.Logger.Info("snapshot: incremental: reading the table in lanes of block ranges", "table", t.Rel.Target.Qualified(), "blocks", end, "lanes", len(runs), "parallelism", w.H.lanes)
	} else {
		w.Logger.Info("snapshot: incremental: reading the table in block ranges", "table", t.Rel.Target.Qualified(), "blocks", end)
	}
	return runs, true, nil
}

// parseBlock reads a block number the state file holds as text.
func parseBlock(v *string) (uint32, error) {
	if v == nil {
		return 0, errors.New("a block range without its bounds")
	}
	n, err := strconv.ParseUint(*v, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("block %q: %w", *v, err)
	}
	return uint32(n), nil
}

// planKeyLanes plans a table's read in primary-key ranges.
func (w *Worker) planKeyLanes(ctx context.Context, conn *pgx.Conn, t *Table) ([]*laneRun, error) {
	inc := w.H
	var runs []*laneRun
	if len(t.Start.Lanes) > 0 {
		for i, l := range t.Start.Lanes {
			if !l.Done {
				runs = append(runs, &laneRun{idx: i, lane: snapshot.Lane{Lo: l.Lo, Hi: l.Hi}, after: l.After, reply: make(chan bool, 4)})
			}
		}
		return runs, nil
	}
	if inc.lanes > 1 && t.Start.After == nil && t.Start.Chunks == 0 {
		var bounds []string
		err := conn.QueryRow(ctx, `SELECT histogram_bounds::text::text[] FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename
			JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = s.schemaname
			WHERE c.oid = $1::regclass AND s.attname = $2 AND NOT s.inherited`, t.Rel.Target.Source(), t.key[0].Name).Scan(&bounds)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("read the histogram of %s.%s: %w", t.Rel.Target.Qualified(), t.key[0].Name, err)
		}
		lanes := snapshot.Lanes(bounds, inc.lanes)
		if len(lanes) == 1 {
			w.Logger.Info("snapshot: incremental: reading the table in one lane: pg_stats has no histogram of its first key column (ANALYZE it to read it in parallel)",
				"table", t.Rel.Target.Qualified(), "column", t.key[0].Name)
		} else {
			for i, l := range lanes {
				t.Plan = append(t.Plan, state.Lane{Lo: l.Lo, Hi: l.Hi})
				runs = append(runs, &laneRun{idx: i, lane: l, reply: make(chan bool, 4)})
			}
			w.Logger.Info("snapshot: incremental: reading the table in lanes", "table", t.Rel.Target.Qualified(), "lanes", len(lanes), "parallelism", inc.lanes)
			return runs, nil
		}
	}
	return []*laneRun{{after: t.Start.After, reply: make(chan bool, 4)}}, nil
}

// readLanes reads the lanes, up to SNAPSHOT_PARALLELISM at once, each on
// its own connection (the first on conn).
func (w *Worker) readLanes(ctx context.Context, conn *pgx.Conn, t *Table, runs []*laneRun) error {
	n := min(w.H.lanes, len(runs))
	if n <= 1 {
		for _, r := range runs {
			if err := w.readLane(ctx, conn, t, r); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	next := func() *laneRun {
		mu.Lock()
		defer mu.Unlock()
		if len(runs) == 0 {
			return nil
		}
		r := runs[0]
		runs = runs[1:]
		return r
	}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		c := conn
		if i > 0 {
			var err error
			if c, err = w.Connect(ctx); err != nil {
				cancel(err)
				break
			}
		}
		wg.Add(1)
		go func(c *pgx.Conn, own bool) {
			defer wg.Done()
			if own {
				defer c.Close(context.WithoutCancel(ctx))
			}
			for r := next(); r != nil; r = next() {
				if err := w.readLane(ctx, c, t, r); err != nil {
					cancel(err)
					return
				}
			}
		}(c, i > 0)
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// readLane reads one lane's chunks, from r.after to its end.
//
// A lane is a pipeline of two chunks. Each chunk's rows are encoded as
// its COPY arrives (as the initial snapshot's are), so a chunk read is a
// chunk ready. Chunk i-1 is handed to the loop, its high watermark
// written in one query with chunk i's low watermark, BEGIN and the
// snapshot's read, and the loop answers it while chunk i is read. So no
// round trip is spent on what can ride on another, and a lane holds two
// chunks.
//
// Exactness does not depend on how late a high watermark is written,
// only on its being after the chunk's snapshot: a later one widens the
// window, and the rows the stream changed in it are the stream's
// (snapshot/chunk.go). A lane's windows overlap as lanes' windows do.
//
// A chunk is handed to the loop only once the chunk before it was
// answered. If that one must be read again, the chunk read after it is
// handed over marked discard (the loop closes its window at its high
// watermark, written at once), and reading resumes where the rejected
// chunk began. So a lane's chunks stay one contiguous sequence of
// ranges, and the state never records a range past one still to be
// read. The lane's last chunk is answered before it returns.
func (w *Worker) readLane(ctx context.Context, conn *pgx.Conn, t *Table, r *laneRun) error {
	lr := &laneReader{w: w, ctx: ctx, conn: conn, t: t, r: r}
	after := r.after
	for {
		// The chunk read last is handed, its high watermark written
		// before the next chunk's low one.
		var marks []Watermark
		if !lr.handed && len(lr.open) > 0 {
			marks = lr.handOut(lr.open[:1])
			lr.handed = true
		}
		seq := w.H.seq.Add(1)
		t0 := time.Now()
		ch, err := w.readChunk(ctx, conn, t, r, seq, after, append(marks, w.mark(t, seq, "low")))
		if err != nil {
			return err
		}
		w.Logger.Debug("snapshot: incremental: chunk read", "chunk", seq, "lane", r.idx, "rows", len(ch.Ends), "took", time.Since(t0))
		lr.open = append(lr.open, ch)
		if lr.handed {
			again, redo, err := lr.answer()
			if err != nil {
				return err
			}
			if again {
				after = redo
				continue
			}
		}
		if !ch.Done {
			after = ch.last
			continue
		}
		again, redo, err := lr.drain()
		if err != nil || !again {
			return err
		}
		after = redo
	}
}

// laneReader is one lane's chunks in flight between the worker and the
// loop: open holds the chunks not answered yet, in the order read;
// open[0] is handed to the loop when handed is set, the others are not.
type laneReader struct {
	w      *Worker
	ctx    context.Context
	conn   *pgx.Conn
	t      *Table
	r      *laneRun
	open   []*Chunk
	handed bool
}

// handOut hands chunks to the loop and returns their high watermarks, to
// be written.
func (lr *laneReader) handOut(chs []*Chunk) []Watermark {
	w, t := lr.w, lr.t
	var marks []Watermark
	for _, ch := range chs {
		w.put(ch)
		if w.Hooks.Get().ChunkRead != nil && !ch.Discard {
			w.Hooks.Get().ChunkRead(t.Rel.Target.Qualified(), ch.keyList())
		}
		marks = append(marks, w.mark(t, ch.Seq, "high"))
	}
	return marks
}

// answer takes open[0]'s answer. When it is to be read again, the chunks
// after it are discarded, and redo is where reading resumes.
func (lr *laneReader) answer() (again bool, redo []string, err error) {
	w := lr.w
	first := lr.open[0]
	if again, err = w.answer(lr.ctx, lr.r.reply); err != nil {
		return false, nil, err
	}
	lr.open, lr.handed = lr.open[1:], false
	if !again || first.Discard {
		return false, nil, nil
	}
	for _, ch := range lr.open {
		ch.Discard = true
	}
	if marks := lr.handOut(lr.open); len(marks) > 0 {
		if err := w.emitWatermarks(lr.ctx, lr.conn, marks...); err != nil {
			return false, nil, err
		}
	}
	for range lr.open {
		if _, err := w.answer(lr.ctx, lr.r.reply); err != nil {
			return false, nil, err
		}
	}
	lr.open = lr.open[:0]
	return true, first.from, nil
}

// drain hands out and answers the chunks still open once the lane's last
// chunk was read, one at a time; again says one is to be read again from
// redo.
func (lr *laneReader) drain() (again bool, redo []string, err error) {
	for len(lr.open) > 0 && !again {
		lr.handed = true
		if err := lr.w.emitWatermarks(lr.ctx, lr.conn, lr.handOut(lr.open[:1])...); err != nil {
			return false, nil, err
		}
		if again, redo, err = lr.answer(); err != nil {
			return false, nil, err
		}
	}
	return again, redo, nil
}

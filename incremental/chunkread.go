package incremental

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/snapshot"
)

// readChunk reads one chunk in its own REPEATABLE READ transaction, begun
// in the query that writes marks (the watermarks before it, its own low
// one last): its snapshot (for the xip rule), then the rows, encoded as
// they arrive, as the initial snapshot encodes them, with their keys.
func (w *Worker) readChunk(ctx context.Context, conn *pgx.Conn, t *Table, r *laneRun, seq uint64, after []string, marks []Watermark) (*Chunk, error) {
	rel := t.Rel
	q, err := w.chunkQuery(t, r, seq, after)
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("chunk %d of %s", seq, rel.Target.Qualified())
	ch := w.H.newChunk()
	expect := q.limit
	if r.blocks {
		expect = int(float64(q.to-q.from) * r.rowsPerBlock)
	}
	ch.reserve(expect, r.lineBytes, r.keyBytes)
	ch.Seq, ch.Table, ch.from, ch.lane, ch.reply = seq, t, after, r.idx, r.reply
	// The whole chunk is one query, one round trip: the watermarks
	// (committed first), the chunk's transaction, its snapshot (and, in
	// block ranges, the relfilenode its COPY scans) as the first COPY
	// line, the rows, and the COMMIT. The rows are encoded as they
	// arrive, as the initial snapshot's are: the COPY's sender and this
	// encoder then run side by side.
	var head []byte
	cr := decode.CopyRow{Rel: rel}
	wctx, touch, idle, stop := idleWatch(ctx, w.Timeout)
	defer stop()
	_, err = snapshot.CopySQL(wctx, conn, rel.Target.Qualified(), chunkSQL(marks, rel.Target.Source(), r.blocks, q.sql), func(line []byte) error {
		touch()
		if head == nil {
			head = append([]byte{}, line...)
			return nil
		}
		q.rows++
		q.size += int64(len(line)) + 1
		if !r.blocks {
			q.lastLine = append(q.lastLine[:0], line...)
		}
		return ch.encodeLine(&cr, line)
	})
	if err != nil {
		// A failure after the BEGIN leaves the transaction open.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		w.H.Recycle(ch)
		if idle() {
			err = fmt.Errorf("no row for %s (PG_REPLICATION_TIMEOUT): the connection went silent: %w", w.Timeout, err)
		}
		if len(marks) > 0 {
			return nil, fmt.Errorf("%s (with the %s watermark of chunk %d): %w", what, marks[0].W, marks[0].Chunk, err)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if ch.snap, err = w.chunkHead(t, r.blocks, what, head); err != nil {
		w.H.Recycle(ch)
		return nil, err
	}
	if err := q.finish(ch, t, r, what); err != nil {
		return nil, err
	}
	return ch, nil
}

// chunkRead is one chunk's query and what its COPY counted.
type chunkRead struct {
	sql      string
	from, to uint32 // the block range (block lanes)
	limit    int    // the row limit (key lanes)
	rows     int64
	size     int64  // bytes of the rows' COPY lines
	lastLine []byte // the last row's COPY line (key lanes)
}

// chunkQuery is the next chunk's COPY query of lane r, after the position
// after (nil: the lane's start): a range of blocks sized to the rates the
// lane measured so far, or the next rows by key, bounded by
// SNAPSHOT_CHUNK_ROWS and by BATCH_MAX_BYTES at the width the lane's rows
// had so far (a chunk is held in memory whole, and TOASTed values make
// rows of any width).
func (w *Worker) chunkQuery(t *Table, r *laneRun, seq uint64, after []string) (*chunkRead, error) {
	rel := t.Rel
	cols := make([]string, len(rel.Cols))
	for i, col := range rel.Cols {
		cols[i] = col.Name
	}
	q := &chunkRead{limit: w.H.limit}
	var err error
	if r.blocks {
		q.from = r.from
		if after != nil {
			if q.from, err = parseBlock(&after[0]); err != nil {
				return nil, fmt.Errorf("chunk %d of %s: %w", seq, rel.Target.Qualified(), err)
			}
		}
		if q.from > r.to {
			return nil, fatal.Wrap(fmt.Errorf("chunk %d of %s: resumes at block %d, past its range's end %d", seq, rel.Target.Qualified(), q.from, r.to))
		}
		r.prevBlocks = min(snapshot.BlocksPerChunk(w.H.limit, w.MaxBytes, r.rowsPerBlock, r.bytesPerBlock, r.prevBlocks), r.to-q.from)
		q.to = q.from + r.prevBlocks
		q.sql, err = snapshot.SourceOf(rel.Target).BlockChunkSQL(cols, q.from, q.to)
		return q, err
	}
	q.limit = min(q.limit, firstKeyChunk)
	if r.bytesPerRow > 0 {
		q.limit = max(1, min(w.H.limit, int(float64(w.MaxBytes)/r.bytesPerRow)))
	}
	q.sql, err = snapshot.SourceOf(rel.Target).LaneChunkSQL(cols, t.key, r.lane, after, q.limit)
	return q, err
}

// finish records what the chunk's read taught the lane (rows per block,
// bytes per row, line and key widths), where the next chunk starts, and
// whether the lane is done.
func (q *chunkRead) finish(ch *Chunk, t *Table, r *laneRun, what string) error {
	rel := t.Rel
	n := q.rows
	if !r.blocks && n > 0 {
		r.bytesPerRow = float64(q.size) / float64(n)
	}
	if n > 0 {
		r.lineBytes, r.keyBytes = float64(len(ch.Buf))/float64(n), float64(len(ch.keyBuf))/float64(n)
	}
	if r.blocks {
		if q.to > q.from && n > 0 {
			r.rowsPerBlock = float64(n) / float64(q.to-q.from)
			r.bytesPerBlock = float64(q.size) / float64(q.to-q.from)
		}
		ch.last = []string{strconv.FormatUint(uint64(q.to), 10)}
		ch.Done = q.to >= r.to
		return nil
	}
	ch.Done = n < int64(q.limit)
	if n == 0 {
		return nil
	}
	// The next chunk is read after this one's last key.
	cr := decode.CopyRow{Rel: rel}
	if _, err := cr.AppendInsert(nil, q.lastLine); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	ch.last = make([]string, len(t.keyAt))
	for j, i := range t.keyAt {
		v, ok := cr.Col(i)
		if !ok {
			return &decode.RefusalError{Table: rel.Target.Qualified(), Column: rel.Cols[i].Name, Reason: "the chunk's last row has a NULL primary key column"}
		}
		ch.last[j] = v
	}
	return nil
}

// chunkSQL is a chunk's one query: marks (the watermarks before it, its
// own low one last) in one transaction, committed; then the chunk's
// REPEATABLE READ READ ONLY transaction, whose first COPY line is its
// snapshot (for the xip rule) and, for a block range, the relfilenode
// its COPY scans; copy (the rows); and its COMMIT. A COMMIT in a
// multi-statement query commits the statements before it; a BEGIN then
// starts a transaction block within the query.
//
// In block ranges the table is locked (ACCESS SHARE, the lock its COPY
// takes anyway) before the relfilenode is read: the lock holds to the
// COMMIT, so no rewrite commits between the read and the COPY's scan,
// and the COPY scans the relfilenode read.
func chunkSQL(marks []Watermark, table string, blocks bool, copy string) string {
	q := WatermarkSQL(marks)
	if q != "" {
		q += "COMMIT;"
	}
	q += "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;"
	if blocks {
		q += "LOCK TABLE " + table + " IN ACCESS SHARE MODE;" +
			"COPY (SELECT pg_current_snapshot()::text, coalesce(pg_relation_filenode(" + pgvalue.QuoteLiteral(table) + "::regclass), 0::oid)::text) TO STDOUT;"
	} else {
		q += "COPY (SELECT pg_current_snapshot()::text) TO STDOUT;"
	}
	return q + copy + ";COMMIT"
}

// chunkHead reads a chunk's first COPY line: its snapshot and, in block
// ranges, the relfilenode its COPY scanned, which must be the one its
// plan was made for. Otherwise the table was rewritten, and rows not read
// yet may have moved into blocks read already: the chunk fails, the
// session ends, and the next one finds the state's plan stale and reads
// the table again from its first block (planBlocks).
func (w *Worker) chunkHead(t *Table, blocks bool, what string, head []byte) (snapshot.TxSnapshot, error) {
	if head == nil {
		return snapshot.TxSnapshot{}, fmt.Errorf("%s: no snapshot line", what)
	}
	text, node, _ := bytes.Cut(head, []byte{'\t'})
	snap, err := snapshot.ParseSnapshot(string(text))
	if err != nil {
		return snapshot.TxSnapshot{}, fmt.Errorf("%s: %w", what, err)
	}
	if !blocks {
		return snap, nil
	}
	filenode, err := strconv.ParseUint(string(node), 10, 32)
	if err != nil {
		return snapshot.TxSnapshot{}, fmt.Errorf("%s: relfilenode %q: %w", what, node, err)
	}
	if uint32(filenode) != t.Blocks.Filenode && !w.Hooks.Get().NoFilenode {
		return snapshot.TxSnapshot{}, fmt.Errorf("%s: the table was rewritten while it was read in block ranges (relfilenode %d, planned for %d: a TRUNCATE, VACUUM FULL, CLUSTER or a rewriting ALTER TABLE); the next session reads it again from its first block",
			what, filenode, t.Blocks.Filenode)
	}
	return snap, nil
}

// encodeLine appends one COPY line to the chunk as an NDJSON insert line
// and its key.
func (ch *Chunk) encodeLine(cr *decode.CopyRow, line []byte) error {
	var err error
	if ch.Buf, err = cr.AppendInsert(ch.Buf, line); err != nil {
		return err
	}
	ch.Ends = append(ch.Ends, len(ch.Buf))
	var ok bool
	if ch.keyBuf, ok = cr.AppendKeyText(ch.keyBuf); !ok {
		return &decode.RefusalError{Table: ch.Table.Rel.Target.Qualified(), Reason: "a row of the chunk has a NULL key column"}
	}
	ch.keyEnds = append(ch.keyEnds, len(ch.keyBuf))
	return nil
}

// chunkTx is a chunk's (or a retraction batch's) REPEATABLE READ READ
// ONLY transaction.
type chunkTx struct {
	conn *pgx.Conn
	what string
	done bool
}

// beginChunk writes marks (committed first, in one transaction), then
// opens the transaction and reads its snapshot's in-progress
// transactions (the xip rule), all in one query. end rolls it back unless
// it was committed.
func beginChunk(ctx context.Context, conn *pgx.Conn, what string, marks []Watermark) (*chunkTx, snapshot.TxSnapshot, error) {
	tx := &chunkTx{conn: conn, what: what}
	q := WatermarkSQL(marks)
	if q != "" {
		// A COMMIT in a multi-statement query commits the statements
		// before it; the BEGIN after it starts a transaction block that
		// outlives the query.
		q += "COMMIT;"
	}
	q += "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;SELECT pg_current_snapshot()::text"
	res, err := conn.PgConn().Exec(ctx, q).ReadAll()
	if err != nil {
		tx.end(ctx)
		if len(marks) > 0 {
			return nil, snapshot.TxSnapshot{}, fmt.Errorf("write the %s watermark of chunk %d and begin %s: %w", marks[0].W, marks[0].Chunk, what, err)
		}
		return nil, snapshot.TxSnapshot{}, fmt.Errorf("begin %s: %w", what, err)
	}
	last := res[len(res)-1]
	if len(last.Rows) != 1 || len(last.Rows[0]) != 1 {
		tx.end(ctx)
		return nil, snapshot.TxSnapshot{}, fmt.Errorf("%s: read its snapshot: %d rows", what, len(last.Rows))
	}
	snap, err := snapshot.ParseSnapshot(string(last.Rows[0][0]))
	if err != nil {
		tx.end(ctx)
		return nil, snapshot.TxSnapshot{}, err
	}
	return tx, snap, nil
}

func (tx *chunkTx) commit(ctx context.Context) error {
	if _, err := tx.conn.Exec(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("%s: commit: %w", tx.what, err)
	}
	tx.done = true
	return nil
}

func (tx *chunkTx) end(ctx context.Context) {
	if !tx.done {
		tx.done = true
		_, _ = tx.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
}

// Chunk is what the worker read between two watermarks.
type Chunk struct {
	Seq   uint64
	Table *Table
	Buf   []byte // NDJSON insert lines
	Ends  []int  // end offset of each line in Buf
	// each line's Feldera key (decode.KeyText), concatenated: key i ends at keyEnds[i]
	keyBuf  []byte
	keyEnds []int
	from    []string            // chunk key it was read after (nil: the table's beginning)
	last    []string            // chunk key of the last row; nil when the chunk is empty
	Done    bool                // fewer rows than the limit: the table's last chunk
	snap    snapshot.TxSnapshot // what the chunk's snapshot did not see
	// Discard: read ahead of a chunk that is read again; the loop drops it.
	Discard bool
	lane    int       // the lane it belongs to
	reply   chan bool // where the loop answers: true reads it again
	// handedAt: when the worker put it for the loop (see WatermarkNudge)
	handedAt time.Time
	// Retract: a batch of a resnapshot's retraction. Its lines are
	// deletes of keys Feldera holds and the batch's snapshot does not,
	// keys their Postgres text; done marks the last batch.
	Retract bool
}

// Answer is the loop's verdict on a handed chunk: again reads it again.
func (ch *Chunk) Answer(again bool) { ch.reply <- again }

// reserve sizes a new chunk's buffers for rows rows of the given bytes per
// row (NDJSON, key), when they hold less: appended to from empty, a
// buffer of megabytes is copied dozens of times as it grows (by a quarter
// at a time), which measured 7 % of an incremental snapshot's CPU over a
// lane's first chunks.
func (ch *Chunk) reserve(rows int, lineBytes, keyBytes float64) {
	if rows <= 0 || lineBytes <= 0 {
		return
	}
	rows += rows / 16
	if n := int(float64(rows) * lineBytes); cap(ch.Buf) < n {
		ch.Buf = make([]byte, 0, n)
	}
	if cap(ch.Ends) < rows {
		ch.Ends = make([]int, 0, rows)
	}
	if n := int(float64(rows) * keyBytes); cap(ch.keyBuf) < n {
		ch.keyBuf = make([]byte, 0, n)
	}
	if cap(ch.keyEnds) < rows {
		ch.keyEnds = make([]int, 0, rows)
	}
}

// key is line i's key.
func (ch *Chunk) key(i int) []byte {
	start := 0
	if i > 0 {
		start = ch.keyEnds[i-1]
	}
	return ch.keyBuf[start:ch.keyEnds[i]]
}

func (ch *Chunk) addKey(k []byte) {
	ch.keyBuf = append(ch.keyBuf, k...)
	ch.keyEnds = append(ch.keyEnds, len(ch.keyBuf))
}

// keyList is the keys as strings (for the test hooks).
func (ch *Chunk) keyList() []string {
	out := make([]string, len(ch.keyEnds))
	for i := range out {
		out[i] = string(ch.key(i))
	}
	return out
}

// newChunk is a chunk with the buffers of one the outbox took, when the
// free list holds one. A chunk's buffers grow to its size (up to
// BATCH_MAX_BYTES) as it is read; reused, they do not grow again, and
// the garbage collector does not run for them (a sync.Pool, which each
// collection empties, kept few: a snapshot of 1,000,000 rows ran the
// collector 31 times, against 5 for the initial snapshot).
func (inc *Handoff) newChunk() *Chunk {
	select {
	case b := <-inc.free:
		return b
	default:
		return &Chunk{}
	}
}

// Recycle gives a chunk's buffers back once nothing reads them. They are
// kept while a worker reads chunks, and dropped once none does.
func (inc *Handoff) Recycle(ch *Chunk) {
	b := &Chunk{Buf: ch.Buf[:0], Ends: ch.Ends[:0], keyBuf: ch.keyBuf[:0], keyEnds: ch.keyEnds[:0]}
	inc.mu.Lock()
	defer inc.mu.Unlock()
	if !inc.running {
		return
	}
	select {
	case inc.free <- b:
	default:
	}
}

// idleWatch returns a context canceled once d passes without a call to
// touch: a read that receives nothing for that long, a chunk's or a
// snapshot's COPY over a connection the network dropped without a reset,
// ends instead of hanging (TCP keepalives cannot see a peer whose kernel
// still answers, such as a proxy that stopped forwarding). idle reports
// whether that is why it ended; stop releases the watch.
func idleWatch(parent context.Context, d time.Duration) (ctx context.Context, touch func(), idle func() bool, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	var last atomic.Int64
	var fired atomic.Bool
	if d <= 0 {
		return ctx, func() {}, fired.Load, cancel
	}
	last.Store(time.Now().UnixNano())
	var t *time.Timer
	var check func()
	check = func() {
		if quiet := time.Since(time.Unix(0, last.Load())); quiet < d {
			t.Reset(d - quiet)
			return
		}
		fired.Store(true)
		cancel()
	}
	t = time.AfterFunc(d, check)
	touch = func() { last.Store(time.Now().UnixNano()) }
	return ctx, touch, fired.Load, func() { t.Stop(); cancel() }
}

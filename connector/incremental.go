package connector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/snapshot"
	"github.com/pgfeldera/pgfeldera/state"
)

// Incremental snapshots (SNAPSHOT_MODE=incremental, issue 17): the slot
// is created without an exported snapshot, the stream starts at once, and
// a worker on its own connection reads each table in chunks (ranges of
// its heap's blocks, or of its primary key for a partitioned table: see
// planBlocks), each in its own short REPEATABLE READ transaction bracketed by a low and
// a high watermark it writes into the stream (pg_logical_emit_message, so
// they are ordered with the data and need no table on the source). The
// stream loop reconciles each chunk with the changes between its
// watermarks (snapshot.Window: the exactness argument is in
// snapshot/chunk.go) and appends the chunk's kept rows to the outbox at
// the high watermark, inside its transaction; the state file records the
// chunk once the acknowledged position passes that transaction's end,
// that is once Feldera made the chunk durable. A crash resumes at the next
// chunk. No backend holds a snapshot for longer than one chunk's COPY.

// WatermarkPrefix is the logical message prefix of the watermarks.
const WatermarkPrefix = "pgfeldera"

// Watermark is a logical message's content: a chunk's Watermark, or a
// resnapshot request (Resnapshot set). Slot and Run tell this session's
// watermarks from another connector's on the same database and from an
// earlier session's, which a replay sends again.
type Watermark struct {
	Slot  string `json:"slot"`
	Run   string `json:"run,omitempty"`
	Chunk uint64 `json:"chunk,omitempty"`
	Table int    `json:"table,omitempty"` // index into TABLES
	W     string `json:"w,omitempty"`     // "low" or "high"
	// A resnapshot request (`pgfeldera resnapshot`): its id, and the
	// Postgres tables (schema.table, as the state file names them).
	Resnapshot string   `json:"resnapshot,omitempty"`
	Tables     []string `json:"tables,omitempty"`
}

// Table is one table an incremental snapshot reads.
type Table struct {
	Idx    int // into the plan's targets and the state's tables
	Rel    *decode.Rel
	key    []snapshot.KeyCol // the primary key, in its order
	keyAt  []int             // per key column: its index in rel.Cols
	Copied int64             // rows this session put in the outbox, for the rate; the loop's
	// Start is the state's entry when the table was queued (the worker's
	// copy): where its chunks resume (After, Lanes), and whether a
	// resnapshot's retraction comes first (Retract).
	Start state.Table
	// Plan is the table's lanes when it is read in more than one and the
	// state does not list them yet: the first chunk recorded records
	// them. The worker sets it before its first chunk is handed.
	Plan []state.Lane
	// Blocks is the block plan the worker reads the table by (nil: key
	// ranges); when the state's differs (none yet, or the table was
	// rewritten), the first chunk recorded replaces the state's plan,
	// its lanes and its position. Set with plan.
	Blocks *state.Blocks
}

// laneRun is one lane being read: its range, where it resumes, and the
// channel the loop answers its chunks on.
type laneRun struct {
	idx   int // into the table's lanes (0 for a table in one)
	lane  snapshot.Lane
	after []string
	reply chan bool
	// A lane of a table read in block ranges: its blocks [from, to)
	// (after, when set, holds the next block), and what the chunks so far
	// read per block, to size the next one.
	blocks                      bool
	from, to                    uint32
	rowsPerBlock, bytesPerBlock float64
	prevBlocks                  uint32 // the last chunk's blocks
	// A lane read in key ranges: the COPY bytes per row its chunks read
	// so far (0: none yet), which bounds the next chunk's rows by
	// BATCH_MAX_BYTES.
	bytesPerRow float64
	// The NDJSON and key bytes per row of the lane's last chunk: a new
	// chunk's buffers are sized from them (reserve).
	lineBytes, keyBytes float64
}

// firstKeyChunk is how many rows a lane read in key ranges reads first,
// before it knows how wide its rows are.
const firstKeyChunk = 16

// Key is what chunkKey found for one table: its primary key, or why
// it cannot be read in chunks.
type Key struct {
	Cols []snapshot.KeyCol
	At  []int
	Err error
}

// Save is a chunk in the outbox: the state records it once the
// acknowledged position reaches lsn (the end of its high watermark's
// transaction).
type Save struct {
	Lane    int
	LSN     pglogrepl.LSN
	Table   *Table
	Rows    int64
	Last    []string
	Done    bool
	Retract bool
}

// incSession is a session's incSession snapshots: the tables the state
// leaves incSession, and those resnapshot requests add while it streams.
// The worker's side is handed, the queue and seq; the stream loop's
// is everything else, which only the loop touches.
type incSession struct {
	run    string
	st     *state.State
	never  bool // SNAPSHOT_MODE=never: requests are refused
	rels   []*decode.Rel
	groups [][]int       // per route: the indexes of its sources
	keys   []Key     // per table in TABLES
	tables []*Table // being read, or queued; the loop's
	limit  int
	lanes  int // SNAPSHOT_PARALLELISM

	mu      sync.Mutex
	conn    *pgx.Conn         // a connection for the first worker, opened at the session's start
	free    chan *Chunk       // chunk buffers to reuse (newChunk, recycle)
	queue   []*Table     // for the worker
	running bool              // a worker runs (it exits when the queue is empty)
	handed  map[uint64]*Chunk // worker → loop: put before the chunk's high watermark is written
	// nHanded is len(handed), kept beside it under mu, so that the loop
	// asks awaited on every message without taking mu once no chunk is
	// handed (the whole session after the snapshot, with a state file).
	nHanded atomic.Int32
	seq     atomic.Uint64 // the last chunk's number

	loop    *Loop // the rule, fed by the stream loop; only the loop touches the rest
	retries int
	lastLog time.Time
	// unsaved is how many chunks the state records in memory and not yet
	// in its file; savedAt is when the file was last written.
	unsaved int
	savedAt time.Time
	started time.Time
}

// chunkKey reads a table's primary key (its columns in index order and
// their types) and checks that it is the Feldera table's key: key-range
// chunks are ranges of the primary key's btree, and the reconciliation is
// by the Feldera key, so the two must be the same columns. (Block-range
// chunks would not need it; the refusal is kept for every table, so that
// a table's mode does not decide what is accepted.)
func chunkKey(ctx context.Context, conn *pgx.Conn, rel *decode.Rel) ([]snapshot.KeyCol, []int, error) {
	t := rel.Target
	if !rel.Keyed() {
		return nil, nil, fatal(fmt.Errorf("SNAPSHOT_MODE=incremental: Feldera table %s (from %s) has no PRIMARY KEY: a keyless table cannot be read in chunks exactly (a stream change to a row not yet copied would count it twice); declare a key or use SNAPSHOT_MODE=initial", t.Dest.Name, t.Qualified()))
	}
	pk, err := catalog.PrimaryKey(ctx, conn, t.Source())
	if err != nil {
		return nil, nil, err
	}
	key := make([]snapshot.KeyCol, len(pk))
	for i, k := range pk {
		key[i] = snapshot.KeyCol{Name: k.Name, Type: k.Type}
	}
	var fel []string
	for _, i := range rel.KeyCols {
		fel = append(fel, rel.Cols[i].Name)
	}
	var pg []string
	for _, k := range key {
		pg = append(pg, k.Name)
	}
	at := make([]int, len(key))
	same := len(key) == len(rel.KeyCols)
	for j, k := range key {
		at[j] = -1
		for _, i := range rel.KeyCols {
			if rel.Cols[i].Name == k.Name {
				at[j] = i
			}
		}
		same = same && at[j] >= 0
	}
	if !same {
		pk := "none"
		if len(pg) > 0 {
			pk = "(" + strings.Join(pg, ", ") + ")"
		}
		return nil, nil, fatal(fmt.Errorf("SNAPSHOT_MODE=incremental: table %s has primary key %s in Postgres, but Feldera table %s is keyed by (%s): chunks are ranges of the Postgres primary key and are reconciled by the Feldera key, so they must be the same columns (use SNAPSHOT_MODE=initial for this mapping)",
			t.Qualified(), pk, t.Dest.Name, strings.Join(fel, ", ")))
	}
	return key, at, nil
}

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
// in chunks, as for a `pgfeldera resnapshot` request (resnapshot.go).
// The resnapshot requests of old (the state replaced) are kept.
func (c *Connector) startIncremental(ctx context.Context, p *plan, rconn *pgconn.PgConn, mappings []snapshot.Mapping, old *state.State, slotExists, retract bool) error {
	// The connection that checks the keys is kept for the session's
	// worker to read chunks on (a connection costs a backend's start:
	// milliseconds on the path to the first chunk).
	conn, err := c.chunkConn(ctx)
	if err != nil {
		return fmt.Errorf("incremental snapshot: %w", err)
	}
	keys, err := p.chunkKeys(ctx, conn)
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return err
	}
	c.keepChunkConn(conn)
	for _, k := range keys {
		if k.Err != nil {
			return k.Err
		}
	}
	// Requests carried from old settle as the tables complete (saveChunks).
	st, err := c.pendingState(ctx, p, rconn, old, slotExists, mappings)
	if err != nil {
		return err
	}
	created, err := snapshot.CreateSlot(ctx, rconn, c.cfg.Slot, false, c.srv.failover)
	if err != nil {
		return err
	}
	if c.test.failAfterSlot {
		return fatal(errors.New("test hook: stopped after creating the slot, before the state records it"))
	}
	for i := range st.Tables {
		st.Tables[i].Status, st.Tables[i].Retract = state.Incremental, retract
	}
	// The slot is this server's: recorded in this write, so that
	// recordServer has none of its own to do.
	st.SystemID, st.Timeline = c.srv.systemID, c.srv.timeline
	if err := state.Save(c.cfg.StateFile, st); err != nil {
		return fatal(err)
	}
	c.logger.Info("snapshot: incremental: created the slot without an exported snapshot; streaming, and reading the tables in chunks meanwhile",
		"consistent_point", created.ConsistentPoint, "chunk_rows", c.chunkRows(), "retract_first", retract)
	return nil
}

// DefaultChunkRows is a chunk's rows when SNAPSHOT_CHUNK_ROWS is empty.
// A chunk is also bounded by BATCH_MAX_BYTES, which bounds its memory
// (two per lane), so more rows cost no memory over that bound; each chunk
// costs the backend a plan, a scan's start and a transaction, and the
// lane a round trip with the backend idle, so fewer, larger chunks read
// faster: bench k measured 0.62 and 0.73 × initial with 30,000-row chunks
// against 0.54 and 0.65 with 10,000 (BATCH_MAX_ROWS, the default before),
// alternating in one run each; the 4 MiB byte bound holds those chunks
// near 32,000 rows.
const DefaultChunkRows = 50000

// chunkRows is how many rows a chunk reads at most: SNAPSHOT_CHUNK_ROWS,
// else DefaultChunkRows.
func (c *Connector) chunkRows() int {
	if c.cfg.SnapshotChunkRows > 0 {
		return c.cfg.SnapshotChunkRows
	}
	return DefaultChunkRows
}

// newIncremental plans the session's incremental snapshots from the state
// file: the tables it leaves incremental are queued for the worker.
// It is nil only without a state file (a first run under
// SNAPSHOT_MODE=never, which no request can change).
func (c *Connector) newIncremental(ctx context.Context, p *plan) (*incSession, error) {
	st, err := state.Load(c.cfg.StateFile)
	if errors.Is(err, state.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fatal(err)
	}
	if len(st.Tables) != len(p.rels) {
		return nil, fatal(fmt.Errorf("state file %s lists %d tables, TABLES %d", c.cfg.StateFile, len(st.Tables), len(p.rels)))
	}
	inc := &incSession{
		run: fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()), st: st, limit: c.chunkRows(),
		never: c.cfg.SnapshotMode == SnapshotNever, rels: p.rels, groups: p.groups,
		lanes: max(c.cfg.SnapshotParallelism, 1), handed: map[uint64]*Chunk{}, loop: NewLoop(),
		// each lane holds two chunks, and the loop one it appends
		free:    make(chan *Chunk, 2*max(c.cfg.SnapshotParallelism, 1)+1),
		started: time.Now(), lastLog: time.Now(),
	}
	// Every table's key is read now, so that a resnapshot request is
	// answered at once, in the stream loop, without a query. The
	// connection is kept for the worker when a table is left to read.
	conn := c.takeChunkConn()
	if conn == nil {
		if conn, err = c.chunkConn(ctx); err != nil {
			return nil, fmt.Errorf("incremental snapshot: %w", err)
		}
	}
	if inc.keys, err = p.chunkKeys(ctx, conn); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	defer func() {
		if inc.conn == nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	if inc.never {
		return inc, nil
	}
	for i, t := range st.Tables {
		if t.Status != state.Incremental {
			continue
		}
		k := inc.keys[i]
		if k.Err != nil {
			return nil, k.Err
		}
		if t.Blocks == nil && t.After != nil && len(t.After) != len(k.Cols) {
			return nil, fatal(fmt.Errorf("state file %s: table %s resumes after a key of %d values, its primary key has %d columns", c.cfg.StateFile, t.Source, len(t.After), len(k.Cols)))
		}
		inc.add(i)
	}
	if len(inc.queue) > 0 {
		inc.conn = conn
	}
	return inc, nil
}

// add queues table i of TABLES for the worker, as the state now records
// it (the loop's call).
func (inc *incSession) add(i int) {
	k := inc.keys[i]
	t := &Table{Idx: i, Rel: inc.rels[i], key: k.Cols, keyAt: k.At, Start: inc.st.Tables[i]}
	// The loop goes on writing its own entry; the worker's copy shares nothing.
	t.Start.After = slices.Clone(t.Start.After)
	t.Start.Lanes = slices.Clone(t.Start.Lanes)
	inc.tables = append(inc.tables, t)
	inc.mu.Lock()
	inc.queue = append(inc.queue, t)
	inc.mu.Unlock()
}

// take is the worker's next table; nil (and the worker stops) when the
// queue is empty.
func (inc *incSession) take() *Table {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	if len(inc.queue) == 0 {
		inc.running = false
		for len(inc.free) > 0 { // the buffers go with the last reader
			<-inc.free
		}
		return nil
	}
	t := inc.queue[0]
	inc.queue = inc.queue[1:]
	return t
}

// awaited is when the oldest chunk still waiting for its high watermark
// was handed; zero when none waits.
func (inc *incSession) awaited() time.Time {
	if inc.nHanded.Load() == 0 {
		return time.Time{}
	}
	inc.mu.Lock()
	defer inc.mu.Unlock()
	var at time.Time
	for _, ch := range inc.handed {
		if at.IsZero() || ch.handedAt.Before(at) {
			at = ch.handedAt
		}
	}
	return at
}

// watermarkNudge is how long a handed chunk's high watermark may take to
// reach the loop before the loop sends a status update, and then how
// often it sends one while the watermark has not come. The watermark is
// committed and flushed right after the chunk is handed, so it comes
// within milliseconds unless the stream is busy decoding what precedes
// it; a status update makes the walsender's socket readable, so a
// walsender asleep without having seen the flush looks again. Without it
// such a wait lasted until the next regular status update (the status
// interval, 10 s by default): CI saw a restart whose first chunk took
// 10.035 s, once, on PostgreSQL 16.
const watermarkNudge = 500 * time.Millisecond

// nudgeAt is when the loop next sends a status update for a chunk handed
// at handed whose high watermark has not come: watermarkNudge after the
// chunk was handed and after the last status update. ok is false when no
// chunk waits (handed is zero).
func nudgeAt(handed, lastStatus time.Time) (at time.Time, ok bool) {
	if handed.IsZero() {
		return time.Time{}, false
	}
	from := handed
	if lastStatus.After(from) {
		from = lastStatus
	}
	return from.Add(watermarkNudge), true
}

// table is the table TABLES lists at idx, if this snapshot reads it.
func (inc *incSession) table(idx int) *Table {
	for _, t := range inc.tables {
		if t.Idx == idx {
			return t
		}
	}
	return nil
}

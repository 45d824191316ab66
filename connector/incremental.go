package connector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/replconn"
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

// watermarkPrefix is the logical message prefix of the watermarks.
const watermarkPrefix = "pgfeldera"

// watermark is a logical message's content: a chunk's watermark, or a
// resnapshot request (Resnapshot set). Slot and Run tell this session's
// watermarks from another connector's on the same database and from an
// earlier session's, which a replay sends again.
type watermark struct {
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

// chunkTable is one table an incremental snapshot reads.
type chunkTable struct {
	idx    int // into the plan's targets and the state's tables
	rel    *decode.Rel
	key    []snapshot.KeyCol // the primary key, in its order
	keyAt  []int             // per key column: its index in rel.Cols
	copied int64             // rows this session put in the outbox, for the rate; the loop's
	// start is the state's entry when the table was queued (the worker's
	// copy): where its chunks resume (After, Lanes), and whether a
	// resnapshot's retraction comes first (Retract).
	start state.Table
	// plan is the table's lanes when it is read in more than one and the
	// state does not list them yet: the first chunk recorded records
	// them. The worker sets it before its first chunk is handed.
	plan []state.Lane
	// blocks is the block plan the worker reads the table by (nil: key
	// ranges); when the state's differs (none yet, or the table was
	// rewritten), the first chunk recorded replaces the state's plan,
	// its lanes and its position. Set with plan.
	blocks *state.Blocks
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

// keyInfo is what chunkKey found for one table: its primary key, or why
// it cannot be read in chunks.
type keyInfo struct {
	key []snapshot.KeyCol
	at  []int
	err error
}

// chunk is what the worker read between two watermarks.
type chunk struct {
	seq   uint64
	table *chunkTable
	buf   []byte // NDJSON insert lines
	ends  []int  // end offset of each line in buf
	// each line's Feldera key (decode.KeyText), concatenated: key i ends at keyEnds[i]
	keyBuf  []byte
	keyEnds []int
	from    []string            // chunk key it was read after (nil: the table's beginning)
	last    []string            // chunk key of the last row; nil when the chunk is empty
	done    bool                // fewer rows than the limit: the table's last chunk
	snap    snapshot.TxSnapshot // what the chunk's snapshot did not see
	// discard: read ahead of a chunk that is read again; the loop drops it.
	discard bool
	lane    int       // the lane it belongs to
	reply   chan bool // where the loop answers: true reads it again
	// handedAt: when the worker put it for the loop (see watermarkNudge)
	handedAt time.Time
	// retract: a batch of a resnapshot's retraction. Its lines are
	// deletes of keys Feldera holds and the batch's snapshot does not,
	// keys their Postgres text; done marks the last batch.
	retract bool
}

// reserve sizes a new chunk's buffers for rows rows of the given bytes per
// row (NDJSON, key), when they hold less: appended to from empty, a
// buffer of megabytes is copied dozens of times as it grows (by a quarter
// at a time), which measured 7 % of an incremental snapshot's CPU over a
// lane's first chunks.
func (ch *chunk) reserve(rows int, lineBytes, keyBytes float64) {
	if rows <= 0 || lineBytes <= 0 {
		return
	}
	rows += rows / 16
	if n := int(float64(rows) * lineBytes); cap(ch.buf) < n {
		ch.buf = make([]byte, 0, n)
	}
	if cap(ch.ends) < rows {
		ch.ends = make([]int, 0, rows)
	}
	if n := int(float64(rows) * keyBytes); cap(ch.keyBuf) < n {
		ch.keyBuf = make([]byte, 0, n)
	}
	if cap(ch.keyEnds) < rows {
		ch.keyEnds = make([]int, 0, rows)
	}
}

// key is line i's key.
func (ch *chunk) key(i int) []byte {
	start := 0
	if i > 0 {
		start = ch.keyEnds[i-1]
	}
	return ch.keyBuf[start:ch.keyEnds[i]]
}

func (ch *chunk) addKey(k []byte) {
	ch.keyBuf = append(ch.keyBuf, k...)
	ch.keyEnds = append(ch.keyEnds, len(ch.keyBuf))
}

// keyList is the keys as strings (for the test hooks).
func (ch *chunk) keyList() []string {
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
func (inc *incremental) newChunk() *chunk {
	select {
	case b := <-inc.free:
		return b
	default:
		return &chunk{}
	}
}

// recycle gives a chunk's buffers back once nothing reads them. They are
// kept while a worker reads chunks, and dropped once none does.
func (inc *incremental) recycle(ch *chunk) {
	b := &chunk{buf: ch.buf[:0], ends: ch.ends[:0], keyBuf: ch.keyBuf[:0], keyEnds: ch.keyEnds[:0]}
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

// chunkSave is a chunk in the outbox: the state records it once the
// acknowledged position reaches lsn (the end of its high watermark's
// transaction).
type chunkSave struct {
	lane    int
	lsn     pglogrepl.LSN
	table   *chunkTable
	rows    int64
	last    []string
	done    bool
	retract bool
}

// incremental is a session's incremental snapshots: the tables the state
// leaves incremental, and those resnapshot requests add while it streams.
// The worker's side is handed, the queue and seq; the stream loop's
// is everything else, which only the loop touches.
type incremental struct {
	run    string
	st     *state.State
	never  bool // SNAPSHOT_MODE=never: requests are refused
	rels   []*decode.Rel
	groups [][]int       // per route: the indexes of its sources
	keys   []keyInfo     // per table in TABLES
	tables []*chunkTable // being read, or queued; the loop's
	limit  int
	lanes  int // SNAPSHOT_PARALLELISM

	mu      sync.Mutex
	conn    *pgx.Conn         // a connection for the first worker, opened at the session's start
	free    chan *chunk       // chunk buffers to reuse (newChunk, recycle)
	queue   []*chunkTable     // for the worker
	running bool              // a worker runs (it exits when the queue is empty)
	handed  map[uint64]*chunk // worker → loop: put before the chunk's high watermark is written
	// nHanded is len(handed), kept beside it under mu, so that the loop
	// asks awaited on every message without taking mu once no chunk is
	// handed (the whole session after the snapshot, with a state file).
	nHanded atomic.Int32
	seq     atomic.Uint64 // the last chunk's number

	loop    *chunkLoop // the rule, fed by the stream loop; only the loop touches the rest
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
	rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod)
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1::regclass AND i.indisprimary
		ORDER BY array_position(i.indkey::int2[], a.attnum)`, t.Source())
	if err != nil {
		return nil, nil, fmt.Errorf("read primary key of %s: %w", t.Qualified(), err)
	}
	var key []snapshot.KeyCol
	for rows.Next() {
		var k snapshot.KeyCol
		if err := rows.Scan(&k.Name, &k.Type); err != nil {
			rows.Close()
			return nil, nil, err
		}
		key = append(key, k)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read primary key of %s: %w", t.Qualified(), err)
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
		if k.err != nil {
			return k.err
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
	if c.failAfterSlot {
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
func (c *Connector) newIncremental(ctx context.Context, p *plan) (*incremental, error) {
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
	inc := &incremental{
		run: fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()), st: st, limit: c.chunkRows(),
		never: c.cfg.SnapshotMode == SnapshotNever, rels: p.rels, groups: p.groups,
		lanes: max(c.cfg.SnapshotParallelism, 1), handed: map[uint64]*chunk{}, loop: newChunkLoop(),
		// each lane holds two chunks, and the loop one it appends
		free:    make(chan *chunk, 2*max(c.cfg.SnapshotParallelism, 1)+1),
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
		if k.err != nil {
			return nil, k.err
		}
		if t.Blocks == nil && t.After != nil && len(t.After) != len(k.key) {
			return nil, fatal(fmt.Errorf("state file %s: table %s resumes after a key of %d values, its primary key has %d columns", c.cfg.StateFile, t.Source, len(t.After), len(k.key)))
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
func (inc *incremental) add(i int) {
	k := inc.keys[i]
	t := &chunkTable{idx: i, rel: inc.rels[i], key: k.key, keyAt: k.at, start: inc.st.Tables[i]}
	// The loop goes on writing its own entry; the worker's copy shares nothing.
	t.start.After = slices.Clone(t.start.After)
	t.start.Lanes = slices.Clone(t.start.Lanes)
	inc.tables = append(inc.tables, t)
	inc.mu.Lock()
	inc.queue = append(inc.queue, t)
	inc.mu.Unlock()
}

// take is the worker's next table; nil (and the worker stops) when the
// queue is empty.
func (inc *incremental) take() *chunkTable {
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

// startWorker starts a worker when tables are queued and none runs.
func (s *stream) startWorker() {
	inc := s.inc
	inc.mu.Lock()
	start := !inc.running && len(inc.queue) > 0
	if start {
		inc.running = true
	}
	inc.mu.Unlock()
	if !start {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.worker(s.flushCtx)
	}()
}

// worker reads the chunks, one at a time, until every table is read or
// ctx ends; an error ends the session through emit.
func (s *stream) worker(ctx context.Context) {
	err := s.readChunks(ctx)
	if err != nil && ctx.Err() == nil {
		s.emit(event{kind: evChunk, err: fmt.Errorf("incremental snapshot: %w", err)})
	}
}

func (s *stream) readChunks(ctx context.Context) error {
	inc := s.inc
	conn := inc.takeConn()
	if conn == nil {
		var err error
		if conn, err = s.c.chunkConn(ctx); err != nil {
			return err
		}
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for t := inc.take(); t != nil; t = inc.take() {
		s.tableStarts(ctx, conn, t)
		if t.start.Retract {
			if err := s.retractTable(ctx, conn, t); err != nil {
				return err
			}
		}
		if t.start.Retract && s.c.retractOnly {
			continue
		}
		lanes, err := s.planLanes(ctx, conn, t)
		if err != nil {
			return err
		}
		if err := s.readLanes(ctx, conn, t, lanes); err != nil {
			return err
		}
	}
	return nil
}

// chunkConn opens a connection that reads chunks, set up in one round
// trip: the pinned settings, and synchronous_commit.
//
// A watermark reaches the stream once its commit is flushed: under
// synchronous_commit = off that waits for the WAL writer (up to
// wal_writer_delay, 200 ms by default, per watermark), which measured 10
// times slower chunks. This connection flushes its own commits (local);
// any other setting is the server's and is kept.
func (c *Connector) chunkConn(ctx context.Context) (*pgx.Conn, error) {
	conn, err := replconn.Connect(ctx, c.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if _, err := conn.Exec(ctx, chunkConnSetup); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("set up a connection for chunks (%s): %w", chunkConnSetup, err)
	}
	return conn, nil
}

// chunkConnSetup is chunkConn's one query (the simple protocol: Exec
// without arguments).
var chunkConnSetup = strings.Join(pinnedGUCs, ";") +
	";SELECT set_config('synchronous_commit', 'local', false) WHERE current_setting('synchronous_commit') = 'off'"

// keepChunkConn keeps a connection startup opened for the session's
// incremental snapshot (newIncremental takes it); the session closes it
// if nothing took it.
func (c *Connector) keepChunkConn(conn *pgx.Conn) {
	c.closeChunkConn()
	c.spareConn = conn
}

func (c *Connector) takeChunkConn() *pgx.Conn {
	conn := c.spareConn
	c.spareConn = nil
	return conn
}

func (c *Connector) closeChunkConn() {
	if conn := c.takeChunkConn(); conn != nil {
		conn.Close(context.Background())
	}
}

// takeConn is the connection newIncremental kept for the first worker, or
// nil.
func (inc *incremental) takeConn() *pgx.Conn {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	conn := inc.conn
	inc.conn = nil
	return conn
}

// chunkKeys is every table's key (chunkKey), read once per session: a
// refusal is the table's err; a failed query is returned.
func (p *plan) chunkKeys(ctx context.Context, conn *pgx.Conn) ([]keyInfo, error) {
	if p.keys != nil {
		return p.keys, nil
	}
	keys := make([]keyInfo, len(p.rels))
	for i, rel := range p.rels {
		k := &keys[i]
		k.key, k.at, k.err = chunkKey(ctx, conn, rel)
		if k.err != nil && !isFatal(k.err) {
			return nil, k.err
		}
	}
	p.keys = keys
	return keys, nil
}

// planLanes is how t is read: in block ranges (planBlocks) when it can
// be, else in key ranges (planKeyLanes): the lanes the state lists (those
// not done), else, for a table not begun and SNAPSHOT_PARALLELISM above 1,
// lanes cut at the histogram of its first key column, else one lane from
// its After.
func (s *stream) planLanes(ctx context.Context, conn *pgx.Conn, t *chunkTable) ([]*laneRun, error) {
	runs, ok, err := s.planBlocks(ctx, conn, t)
	if err != nil || ok {
		return runs, err
	}
	return s.planKeyLanes(ctx, conn, t)
}

// planBlocks plans an ordinary table's read in block ranges: the state's
// plan when the table still has its relfilenode, else a new one from its
// first block, cut into SNAPSHOT_PARALLELISM lanes of equal size. ok is
// false for a table read in key ranges: a partitioned one (its leaves
// have block numbers of their own), or one whose key-range read the state
// records as begun.
func (s *stream) planBlocks(ctx context.Context, conn *pgx.Conn, t *chunkTable) ([]*laneRun, bool, error) {
	st := t.start
	if s.c.chunkByKey || (st.Blocks == nil && (st.After != nil || len(st.Lanes) > 0)) {
		return nil, false, nil
	}
	var (
		kind     string
		filenode uint32
		end      int64
	)
	err := conn.QueryRow(ctx, `SELECT c.relkind::text, coalesce(pg_relation_filenode(c.oid), 0::oid),
		pg_relation_size(c.oid) / current_setting('block_size')::int8
		FROM pg_class c WHERE c.oid = $1::regclass`, t.rel.Target.Source()).Scan(&kind, &filenode, &end)
	if err != nil {
		return nil, false, fmt.Errorf("read the size of %s: %w", t.rel.Target.Qualified(), err)
	}
	if kind != "r" {
		return nil, false, nil
	}
	if st.Blocks != nil && st.Blocks.Filenode == filenode {
		t.blocks = &state.Blocks{Filenode: st.Blocks.Filenode, End: st.Blocks.End}
		var runs []*laneRun
		if len(st.Lanes) > 0 {
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
					return nil, false, fatal(fmt.Errorf("state file %s: table %s: lane %d: %w", s.c.cfg.StateFile, st.Source, i, err))
				}
				runs = append(runs, r)
			}
			return runs, true, nil
		}
		return []*laneRun{{after: st.After, reply: make(chan bool, 4), blocks: true, to: st.Blocks.End}}, true, nil
	}
	if st.Blocks != nil {
		s.logger.Warn("snapshot: incremental: the table was rewritten (a TRUNCATE, VACUUM FULL, CLUSTER, a rewriting ALTER TABLE) since its read in block ranges began: reading it again from its first block",
			"table", t.rel.Target.Qualified(), "relfilenode", filenode, "planned_relfilenode", st.Blocks.Filenode)
	}
	if end > math.MaxUint32 {
		return nil, false, fmt.Errorf("%s has %d blocks: more than a block number holds", t.rel.Target.Qualified(), end)
	}
	t.blocks = &state.Blocks{Filenode: filenode, End: uint32(end)}
	t.plan = nil
	cuts := snapshot.BlockLanes(uint32(end), s.inc.lanes)
	runs := make([]*laneRun, len(cuts))
	for i, c := range cuts {
		runs[i] = &laneRun{idx: i, reply: make(chan bool, 4), blocks: true, from: c[0], to: c[1]}
		if len(cuts) > 1 {
			lo, hi := strconv.FormatUint(uint64(c[0]), 10), strconv.FormatUint(uint64(c[1]), 10)
			t.plan = append(t.plan, state.Lane{Lo: &lo, Hi: &hi})
		}
	}
	if len(runs) > 1 {
		s.logger.Info("snapshot: incremental: reading the table in lanes of block ranges", "table", t.rel.Target.Qualified(), "blocks", end, "lanes", len(runs), "parallelism", s.inc.lanes)
	} else {
		s.logger.Info("snapshot: incremental: reading the table in block ranges", "table", t.rel.Target.Qualified(), "blocks", end)
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
func (s *stream) planKeyLanes(ctx context.Context, conn *pgx.Conn, t *chunkTable) ([]*laneRun, error) {
	inc := s.inc
	var runs []*laneRun
	if len(t.start.Lanes) > 0 {
		for i, l := range t.start.Lanes {
			if !l.Done {
				runs = append(runs, &laneRun{idx: i, lane: snapshot.Lane{Lo: l.Lo, Hi: l.Hi}, after: l.After, reply: make(chan bool, 4)})
			}
		}
		return runs, nil
	}
	if inc.lanes > 1 && t.start.After == nil && t.start.Chunks == 0 {
		var bounds []string
		err := conn.QueryRow(ctx, `SELECT histogram_bounds::text::text[] FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename
			JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = s.schemaname
			WHERE c.oid = $1::regclass AND s.attname = $2 AND NOT s.inherited`, t.rel.Target.Source(), t.key[0].Name).Scan(&bounds)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("read the histogram of %s.%s: %w", t.rel.Target.Qualified(), t.key[0].Name, err)
		}
		lanes := snapshot.Lanes(bounds, inc.lanes)
		if len(lanes) == 1 {
			s.logger.Info("snapshot: incremental: reading the table in one lane: pg_stats has no histogram of its first key column (ANALYZE it to read it in parallel)",
				"table", t.rel.Target.Qualified(), "column", t.key[0].Name)
		} else {
			for i, l := range lanes {
				t.plan = append(t.plan, state.Lane{Lo: l.Lo, Hi: l.Hi})
				runs = append(runs, &laneRun{idx: i, lane: l, reply: make(chan bool, 4)})
			}
			s.logger.Info("snapshot: incremental: reading the table in lanes", "table", t.rel.Target.Qualified(), "lanes", len(lanes), "parallelism", inc.lanes)
			return runs, nil
		}
	}
	return []*laneRun{{after: t.start.After, reply: make(chan bool, 4)}}, nil
}

// readLanes reads the lanes, up to SNAPSHOT_PARALLELISM at once, each on
// its own connection (the first on conn).
func (s *stream) readLanes(ctx context.Context, conn *pgx.Conn, t *chunkTable, runs []*laneRun) error {
	n := min(s.inc.lanes, len(runs))
	if n <= 1 {
		for _, r := range runs {
			if err := s.readLane(ctx, conn, t, r); err != nil {
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
			if c, err = s.c.chunkConn(ctx); err != nil {
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
				if err := s.readLane(ctx, c, t, r); err != nil {
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

// tableStarts sets a table's progress metrics from the state and logs it.
func (s *stream) tableStarts(ctx context.Context, conn *pgx.Conn, t *chunkTable) {
	inc := s.inc
	st := t.start
	var estimate float64
	_ = conn.QueryRow(ctx, "SELECT greatest(reltuples, 0) FROM pg_class WHERE oid = $1::regclass", t.rel.Target.Source()).Scan(&estimate)
	ts := s.c.tableStats[t.rel.Target.Route]
	ts.Estimate.Store(int64(estimate))
	left := (int64(estimate) - st.Copied + int64(inc.limit) - 1) / int64(inc.limit)
	ts.ChunksDone.Store(st.Chunks)
	ts.ChunksTotal.Store(st.Chunks + max(left, 1))
	s.logger.Info("snapshot: incremental: table to read", "table", st.Source, "chunks_done", st.Chunks, "rows_copied", st.Copied,
		"estimate", int64(estimate), "resume_after", strings.Join(st.After, ","), "retract_first", st.Retract)
}

// answer is the loop's verdict on the chunk a lane handed before: true
// reads it again.
func (s *stream) answer(ctx context.Context, reply chan bool) (bool, error) {
	select {
	case again := <-reply:
		return again, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// hand gives the loop a chunk, then writes its high watermark: the loop
// takes the chunk there.
func (s *stream) hand(ctx context.Context, conn *pgx.Conn, ch *chunk) error {
	s.put(ch)
	return s.emitWatermarks(ctx, conn, s.mark(ch.table, ch.seq, "high"))
}

// put leaves a chunk for the loop, which takes it at its high watermark,
// and wakes the loop, which then bounds its receive by the chunk's nudge
// (watermarkNudge).
func (s *stream) put(ch *chunk) {
	ch.handedAt = time.Now()
	s.inc.mu.Lock()
	s.inc.handed[ch.seq] = ch
	s.inc.nHanded.Store(int32(len(s.inc.handed)))
	s.inc.mu.Unlock()
	s.wake.fire() // a receive under way has no nudge deadline yet
}

// awaited is when the oldest chunk still waiting for its high watermark
// was handed; zero when none waits.
func (inc *incremental) awaited() time.Time {
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
func (s *stream) readLane(ctx context.Context, conn *pgx.Conn, t *chunkTable, r *laneRun) error {
	inc := s.inc
	// The lane's chunks not answered yet, in the order read; open[0] is
	// handed to the loop when handed is set, the others are not.
	var open []*chunk
	handed := false
	// handOut hands chunks to the loop and returns their high
	// watermarks, to be written.
	handOut := func(chs []*chunk) []watermark {
		var marks []watermark
		for _, ch := range chs {
			s.put(ch)
			if s.c.chunkRead != nil && !ch.discard {
				s.c.chunkRead(t.rel.Target.Qualified(), ch.keyList())
			}
			marks = append(marks, s.mark(t, ch.seq, "high"))
		}
		return marks
	}
	// answer takes open[0]'s answer. When it is to be read again, the
	// chunks after it are discarded, and redo is where reading resumes.
	answer := func() (again bool, redo []string, err error) {
		first := open[0]
		if again, err = s.answer(ctx, r.reply); err != nil {
			return false, nil, err
		}
		open, handed = open[1:], false
		if !again || first.discard {
			return false, nil, nil
		}
		for _, ch := range open {
			ch.discard = true
		}
		if marks := handOut(open); len(marks) > 0 {
			if err := s.emitWatermarks(ctx, conn, marks...); err != nil {
				return false, nil, err
			}
		}
		for range open {
			if _, err := s.answer(ctx, r.reply); err != nil {
				return false, nil, err
			}
		}
		open = open[:0]
		return true, first.from, nil
	}
	after := r.after
	for {
		// The chunk read last is handed, its high watermark written
		// before the next chunk's low one.
		var marks []watermark
		if !handed && len(open) > 0 {
			marks = handOut(open[:1])
			handed = true
		}
		seq := inc.seq.Add(1)
		t0 := time.Now()
		ch, err := s.readChunk(ctx, conn, t, r, seq, after, append(marks, s.mark(t, seq, "low")))
		if err != nil {
			return err
		}
		s.logger.Debug("snapshot: incremental: chunk read", "chunk", seq, "lane", r.idx, "rows", len(ch.ends), "took", time.Since(t0))
		open = append(open, ch)
		if handed {
			again, redo, err := answer()
			if err != nil {
				return err
			}
			if again {
				after = redo
				continue
			}
		}
		if !ch.done {
			after = ch.last
			continue
		}
		// The lane's last chunk was read: hand out and answer the rest,
		// one at a time.
		again := false
		for len(open) > 0 && !again {
			handed = true
			if err := s.emitWatermarks(ctx, conn, handOut(open[:1])...); err != nil {
				return err
			}
			var redo []string
			if again, redo, err = answer(); err != nil {
				return err
			}
			if again {
				after = redo
			}
		}
		if !again {
			return nil
		}
	}
}

// mark is a watermark of chunk seq of t.
func (s *stream) mark(t *chunkTable, seq uint64, w string) watermark {
	return watermark{Slot: s.c.cfg.Slot, Run: s.inc.run, Chunk: seq, Table: t.idx, W: w}
}

// emitWatermarks writes watermarks into the stream, in order, in one
// transaction (one simple query of several statements is one implicit
// transaction).
func (s *stream) emitWatermarks(ctx context.Context, conn *pgx.Conn, ws ...watermark) error {
	if _, err := conn.Exec(ctx, watermarkSQL(ws)); err != nil {
		return fmt.Errorf("write the %s watermark of chunk %d: %w", ws[0].W, ws[0].Chunk, err)
	}
	return nil
}

// watermarkSQL is the statements that write ws, in order.
func watermarkSQL(ws []watermark) string {
	var q strings.Builder
	for _, w := range ws {
		b, _ := json.Marshal(w)
		q.WriteString("SELECT pg_logical_emit_message(true, '" + watermarkPrefix + "', " + replconn.QuoteLiteral(string(b)) + "::text);")
	}
	return q.String()
}

// readChunk reads one chunk in its own REPEATABLE READ transaction, begun
// in the query that writes marks (the watermarks before it, its own low
// one last): its snapshot (for the xip rule), then the rows, encoded as
// they arrive, as the initial snapshot encodes them, with their keys.
func (s *stream) readChunk(ctx context.Context, conn *pgx.Conn, t *chunkTable, r *laneRun, seq uint64, after []string, marks []watermark) (*chunk, error) {
	rel := t.rel
	cols := make([]string, len(rel.Cols))
	for i, col := range rel.Cols {
		cols[i] = col.Name
	}
	var sql string
	var from, to uint32
	var err error
	if r.blocks {
		from = r.from
		if after != nil {
			if from, err = parseBlock(&after[0]); err != nil {
				return nil, fmt.Errorf("chunk %d of %s: %w", seq, rel.Target.Qualified(), err)
			}
		}
		if from > r.to {
			return nil, fatal(fmt.Errorf("chunk %d of %s: resumes at block %d, past its range's end %d", seq, rel.Target.Qualified(), from, r.to))
		}
		r.prevBlocks = min(snapshot.BlocksPerChunk(s.inc.limit, s.c.cfg.BatchMaxBytes, r.rowsPerBlock, r.bytesPerBlock, r.prevBlocks), r.to-from)
		to = from + r.prevBlocks
		sql, err = copySource(rel.Target).BlockChunkSQL(cols, from, to)
	}
	limit := s.inc.limit
	if !r.blocks {
		// Rows are bounded by SNAPSHOT_CHUNK_ROWS, and by BATCH_MAX_BYTES
		// at the width the lane's rows had so far: a chunk is held in
		// memory whole, and TOASTed values make rows of any width.
		limit = min(limit, firstKeyChunk)
		if r.bytesPerRow > 0 {
			limit = max(1, min(s.inc.limit, int(float64(s.c.cfg.BatchMaxBytes)/r.bytesPerRow)))
		}
		sql, err = copySource(rel.Target).LaneChunkSQL(cols, t.key, r.lane, after, limit)
	}
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("chunk %d of %s", seq, rel.Target.Qualified())
	ch := s.inc.newChunk()
	expect := limit
	if r.blocks {
		expect = int(float64(to-from) * r.rowsPerBlock)
	}
	ch.reserve(expect, r.lineBytes, r.keyBytes)
	ch.seq, ch.table, ch.from, ch.lane, ch.reply = seq, t, after, r.idx, r.reply
	// The whole chunk is one query, one round trip: the watermarks
	// (committed first), the chunk's transaction, its snapshot (and, in
	// block ranges, the relfilenode its COPY scans) as the first COPY
	// line, the rows, and the COMMIT. The rows are encoded as they
	// arrive, as the initial snapshot's are: the COPY's sender and this
	// encoder then run side by side.
	var size, n int64
	var head []byte
	var lastLine []byte
	cr := decode.CopyRow{Rel: rel}
	wctx, touch, idle, stop := idleWatch(ctx, s.live.timeout)
	defer stop()
	_, err = snapshot.CopySQL(wctx, conn, rel.Target.Qualified(), chunkSQL(marks, rel.Target.Source(), r.blocks, sql), func(line []byte) error {
		touch()
		if head == nil {
			head = append([]byte{}, line...)
			return nil
		}
		n++
		size += int64(len(line)) + 1
		if !r.blocks {
			lastLine = append(lastLine[:0], line...)
		}
		return ch.encodeLine(&cr, line)
	})
	if err != nil {
		// A failure after the BEGIN leaves the transaction open.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		s.inc.recycle(ch)
		if idle() {
			err = fmt.Errorf("no row for %s (PG_REPLICATION_TIMEOUT): the connection went silent: %w", s.live.timeout, err)
		}
		if len(marks) > 0 {
			return nil, fmt.Errorf("%s (with the %s watermark of chunk %d): %w", what, marks[0].W, marks[0].Chunk, err)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if ch.snap, err = s.chunkHead(t, r.blocks, what, head); err != nil {
		s.inc.recycle(ch)
		return nil, err
	}
	if !r.blocks && n > 0 {
		r.bytesPerRow = float64(size) / float64(n)
	}
	if n > 0 {
		r.lineBytes, r.keyBytes = float64(len(ch.buf))/float64(n), float64(len(ch.keyBuf))/float64(n)
	}
	if r.blocks {
		if to > from && n > 0 {
			r.rowsPerBlock = float64(n) / float64(to-from)
			r.bytesPerBlock = float64(size) / float64(to-from)
		}
		ch.last = []string{strconv.FormatUint(uint64(to), 10)}
		ch.done = to >= r.to
	} else if n > 0 {
		// The next chunk is read after this one's last key.
		cr := decode.CopyRow{Rel: rel}
		if _, err := cr.AppendInsert(nil, lastLine); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		ch.last = make([]string, len(t.keyAt))
		for j, i := range t.keyAt {
			v, ok := cr.Col(i)
			if !ok {
				return nil, &decode.RefusalError{Table: rel.Target.Qualified(), Column: rel.Cols[i].Name, Reason: "the chunk's last row has a NULL primary key column"}
			}
			ch.last[j] = v
		}
	}
	if !r.blocks {
		ch.done = n < int64(limit)
	}
	return ch, nil
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
func chunkSQL(marks []watermark, table string, blocks bool, copy string) string {
	q := watermarkSQL(marks)
	if q != "" {
		q += "COMMIT;"
	}
	q += "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;"
	if blocks {
		q += "LOCK TABLE " + table + " IN ACCESS SHARE MODE;" +
			"COPY (SELECT pg_current_snapshot()::text, coalesce(pg_relation_filenode(" + replconn.QuoteLiteral(table) + "::regclass), 0::oid)::text) TO STDOUT;"
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
func (s *stream) chunkHead(t *chunkTable, blocks bool, what string, head []byte) (snapshot.TxSnapshot, error) {
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
	if uint32(filenode) != t.blocks.Filenode && !s.c.noFilenode {
		return snapshot.TxSnapshot{}, fmt.Errorf("%s: the table was rewritten while it was read in block ranges (relfilenode %d, planned for %d: a TRUNCATE, VACUUM FULL, CLUSTER or a rewriting ALTER TABLE); the next session reads it again from its first block",
			what, filenode, t.blocks.Filenode)
	}
	return snap, nil
}

// encodeLine appends one COPY line to the chunk as an NDJSON insert line
// and its key.
func (ch *chunk) encodeLine(cr *decode.CopyRow, line []byte) error {
	var err error
	if ch.buf, err = cr.AppendInsert(ch.buf, line); err != nil {
		return err
	}
	ch.ends = append(ch.ends, len(ch.buf))
	var ok bool
	if ch.keyBuf, ok = cr.AppendKeyText(ch.keyBuf); !ok {
		return &decode.RefusalError{Table: ch.table.rel.Target.Qualified(), Reason: "a row of the chunk has a NULL key column"}
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
func beginChunk(ctx context.Context, conn *pgx.Conn, what string, marks []watermark) (*chunkTx, snapshot.TxSnapshot, error) {
	tx := &chunkTx{conn: conn, what: what}
	q := watermarkSQL(marks)
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

// incEvent is the loop's side of every decoded event while an incremental
// snapshot runs: it remembers which transactions changed a table still to
// read (for the xip rule), feeds the open window the keys of its table,
// poisons it on a TRUNCATE of that table, and handles the watermarks.
func (s *stream) incEvent(ev *decode.Event) error {
	l := s.inc.loop
	switch ev.Kind {
	case decode.KindBegin:
		l.begin(ev.Begin.Xid, ev.Begin.FinalLSN)
	case decode.KindRows:
		l.rows(ev.Route, ev.Keys, ev.KeyUnknown)
	case decode.KindTruncate:
		for _, r := range ev.Truncated {
			l.truncated(r.Target.Route)
		}
	case decode.KindCommit:
		if ch := l.commit(ev.Commit.CommitLSN, ev.Commit.EndLSN); ch != nil {
			return s.appendChunk(ch)
		}
	case decode.KindMessage:
		if ev.Message.Prefix == watermarkPrefix {
			return s.message(ev.Message)
		}
	}
	return nil
}

func (s *stream) message(m decode.Message) error {
	inc := s.inc
	var w watermark
	if err := json.Unmarshal(m.Content, &w); err != nil {
		s.logger.Warn("snapshot: incremental: ignoring a logical message with prefix "+watermarkPrefix+" that is neither a watermark nor a request", "lsn", m.LSN, "err", err)
		return nil
	}
	if w.Slot != s.c.cfg.Slot {
		return nil // another connector's
	}
	if w.Resnapshot != "" {
		return s.request(w, m.LSN)
	}
	if w.Run != inc.run {
		return nil // an earlier session's, replayed
	}
	switch w.W {
	case "low":
		t := inc.table(w.Table)
		if t == nil {
			return fmt.Errorf("incremental snapshot: low watermark of chunk %d names table %d, which this snapshot does not read", w.Chunk, w.Table)
		}
		if err := inc.loop.low(w.Chunk, t.rel.Target.Route); err != nil {
			return err
		}
		s.dec.WantKeys[t.rel.Target.Route] = true
	case "high":
		return s.highWatermark(w.Chunk)
	}
	return nil
}

// table is the table TABLES lists at idx, if this snapshot reads it.
func (inc *incremental) table(idx int) *chunkTable {
	for _, t := range inc.tables {
		if t.idx == idx {
			return t
		}
	}
	return nil
}

// highWatermark closes the window: the chunk is read again when the
// window cannot be trusted, else its kept rows enter the outbox at the
// watermark's COMMIT (incEvent), so that the batches they fill end
// between source transactions.
func (s *stream) highWatermark(seq uint64) error {
	inc := s.inc
	inc.mu.Lock()
	ch := inc.handed[seq]
	delete(inc.handed, seq)
	inc.nHanded.Store(int32(len(inc.handed)))
	inc.mu.Unlock()
	route := -1
	if w := inc.loop.wins[seq]; w != nil {
		route = w.route
	}
	why, err := inc.loop.high(seq, ch, s.c.noWindow)
	if err != nil {
		return err
	}
	s.dec.WantKeys[route] = inc.loop.watching(route)
	if why != "" && !ch.discard {
		inc.retries++
		what := "chunk"
		if ch.retract {
			what = "retraction batch"
		}
		s.logger.Info("snapshot: incremental: reading a "+what+" again", "table", ch.table.rel.Target.Qualified(), "chunk", ch.seq, "why", why)
	}
	ch.reply <- why != ""
	if why != "" {
		s.inc.recycle(ch) // the lane reads it again, or drops it
	}
	return nil
}

// appendChunk adds a chunk's kept rows to the outbox at its high
// watermark's COMMIT, after every change before it. The watermark's
// transaction holds nothing else, so the batches the rows fill are sealed
// at the usual bounds (BATCH_MAX_ROWS, BATCH_MAX_BYTES) as between source
// transactions; only the last one carries the COMMIT's position.
func (s *stream) appendChunk(ch *chunk) error {
	s.open = false
	route := ch.table.rel.Target.Route
	now := time.Now()
	if s.filling.total == 0 && len(ch.ends) > 0 && len(ch.ends) <= s.c.cfg.BatchMaxRows && len(ch.buf) <= s.c.cfg.BatchMaxBytes {
		// The chunk is one batch: its buffer becomes the batch's (no copy),
		// and the batch's empty one goes back to the pool with the chunk.
		s.filling.bufs[route], ch.buf = ch.buf, s.filling.bufs[route][:0]
		s.filling.added(route, len(ch.ends), now)
	} else if err := s.copyChunk(ch, route, now); err != nil {
		return err
	}
	if ch.done && s.filling.total > 0 {
		s.filling.sealNow = true
	}
	return s.chunkAppended(ch)
}

// copyChunk copies a chunk's rows into the outbox, sealing batches at
// their bounds: each batch takes, in one copy, the lines up to the one
// that reaches BATCH_MAX_ROWS or BATCH_MAX_BYTES (as the stream seals a
// batch after the change that reached a bound).
func (s *stream) copyChunk(ch *chunk, route int, now time.Time) error {
	maxRows, maxBytes := s.c.cfg.BatchMaxRows, s.c.cfg.BatchMaxBytes
	for i, start := 0, 0; i < len(ch.ends); {
		if s.c.full(s.filling) {
			for !s.canPost() {
				if err := s.waitEvent(); err != nil {
					return err
				}
			}
			s.startFlush(false)
		}
		b := s.filling
		rows, size := b.total, b.size()
		j := i
		for j < len(ch.ends)-1 && rows+j-i+1 < maxRows && size+ch.ends[j]-start < maxBytes {
			j++
		}
		end := ch.ends[j]
		b.bufs[route] = append(b.bufs[route], ch.buf[start:end]...)
		b.added(route, j-i+1, now)
		i, start = j+1, end
	}
	return nil
}

// chunkAppended counts a chunk the outbox took and frees its buffers.
func (s *stream) chunkAppended(ch *chunk) error {
	route := ch.table.rel.Target.Route
	kept := int64(len(ch.ends))
	s.inc.recycle(ch)
	if ch.retract {
		s.c.stats.Retracted.Add(kept)
		return nil
	}
	s.c.stats.SnapshotRows.Add(kept)
	s.c.tableStats[route].Copied.Add(kept)
	ch.table.copied += kept
	return nil
}

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
	for _, sv := range inc.loop.due(s.c.acked) {
		t := &inc.st.Tables[sv.table.idx]
		if sv.retract {
			t.Retracted += sv.rows
			if !sv.done {
				continue
			}
			t.Retract = false
			if err := s.writeChunks(); err != nil {
				return err
			}
			s.logger.Info("resnapshot: retraction done; reading the chunks", "table", t.Source, "deleted", t.Retracted)
			continue
		}
		t.Chunks++
		t.Copied += sv.rows
		done := sv.done
		if b := sv.table.blocks; b != nil && (t.Blocks == nil || *t.Blocks != *b) {
			// The worker's block plan is new (the first, or after a
			// rewrite): it replaces the state's, with its lanes.
			t.Blocks, t.After, t.Lanes = &state.Blocks{Filenode: b.Filenode, End: b.End}, nil, nil
		}
		if len(t.Lanes) == 0 && len(sv.table.plan) > 1 {
			t.Lanes = slices.Clone(sv.table.plan)
		}
		if len(t.Lanes) > 0 {
			l := &t.Lanes[sv.lane]
			if sv.last != nil {
				l.After = sv.last
			}
			l.Done = l.Done || sv.done
			done = !slices.ContainsFunc(t.Lanes, func(l state.Lane) bool { return !l.Done })
		} else if sv.last != nil {
			t.After = sv.last
		}
		ts := s.c.tableStats[sv.table.rel.Target.Route]
		if ts.ChunksDone.Add(1) >= ts.ChunksTotal.Load() && !done {
			ts.ChunksTotal.Add(1) // more rows than the estimate
		}
		if done {
			t.Status, t.After, t.Lanes, t.Blocks, t.Rows = state.Complete, nil, nil, nil, t.Copied
			inc.tables = slices.DeleteFunc(inc.tables, func(x *chunkTable) bool { return x == sv.table })
			before := doneRequests(inc.st)
			inc.st.SettleRequests()
			for _, r := range inc.st.Requests {
				if r.Done && !before[r.ID] {
					s.logger.Info("resnapshot: request done; its tables are exact in Feldera", "id", r.ID, "tables", strings.Join(r.Tables, ","))
				}
			}
		}
		inc.unsaved++
		if done {
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

func (s *stream) progress(sv chunkSave, t *state.Table, done bool) {
	inc := s.inc
	route := sv.table.rel.Target.Route
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
	rate := float64(sv.table.copied) / time.Since(inc.started).Seconds()
	args := []any{"table", t.Source, "chunks", t.Chunks, "rows", t.Copied, "estimate", estimate, "rows_per_sec", int64(rate)}
	if rate > 0 && estimate > t.Copied {
		args = append(args, "eta", (time.Duration(float64(estimate-t.Copied)/rate) * time.Second).Round(time.Second).String())
	}
	s.logger.Info("snapshot: incremental: copying", args...)
}

package incremental

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/state"
)

// Handoff is the only state the worker and the stream loop share: the
// tables queued for the worker, the chunks it handed and the loop has not
// taken yet, the chunk buffers to reuse, and the chunk numbers. What a
// chunk (and its table's block plan) carries from the worker to the loop
// is written before Hand and read after Taken, so its mutex publishes
// it. Safe for concurrent use.
type Handoff struct {
	run   string // this session's run: its watermarks' Run
	limit int    // a chunk's rows at most (SNAPSHOT_CHUNK_ROWS)
	lanes int    // SNAPSHOT_PARALLELISM

	mu      sync.Mutex
	conn    *pgx.Conn         // a connection for the first worker, opened at the session's start
	free    chan *Chunk       // chunk buffers to reuse (newChunk, recycle)
	queue   []*Table          // for the worker
	running bool              // a worker runs (it exits when the queue is empty)
	handed  map[uint64]*Chunk // worker → loop: put before the chunk's high watermark is written
	// nHanded is len(handed), kept beside it under mu, so that the loop
	// asks Awaited on every message without taking mu once no chunk is
	// handed (the whole session after the snapshot, with a state file).
	nHanded atomic.Int32
	seq     atomic.Uint64 // the last chunk's number
}

// NewHandoff is a session's hand-off, chunks of at most limit rows read in
// up to lanes lanes.
func NewHandoff(limit, lanes int) *Handoff {
	lanes = max(lanes, 1)
	return &Handoff{
		run:   fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()),
		limit: limit, lanes: lanes, handed: map[uint64]*Chunk{},
		// each lane holds two chunks, and the loop one it appends
		free: make(chan *Chunk, 2*lanes+1),
	}
}

// Run is the session's run: a watermark of another Run is an earlier
// session's, replayed.
func (inc *Handoff) Run() string { return inc.run }

// NewTable is table idx of TABLES as the state records it now, to be
// read with key k.
func NewTable(idx int, rel *decode.Rel, k catalog.Key, st state.Table) *Table {
	t := &Table{Idx: idx, Rel: rel, key: k.Cols, keyAt: k.At, Start: st}
	// The loop goes on writing its own entry; the worker's copy shares nothing.
	t.Start.After = slices.Clone(t.Start.After)
	t.Start.Lanes = slices.Clone(t.Start.Lanes)
	return t
}

// Queue queues t for the worker.
func (inc *Handoff) Queue(t *Table) {
	inc.mu.Lock()
	inc.queue = append(inc.queue, t)
	inc.mu.Unlock()
}

// Queued reports whether tables wait for a worker.
func (inc *Handoff) Queued() bool {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	return len(inc.queue) > 0
}

// StartWorker reports whether a worker is to start: tables are queued and
// none runs. It then counts as running.
func (inc *Handoff) StartWorker() bool {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	start := !inc.running && len(inc.queue) > 0
	if start {
		inc.running = true
	}
	return start
}

// SetConn keeps conn for the first worker.
func (inc *Handoff) SetConn(conn *pgx.Conn) {
	inc.mu.Lock()
	inc.conn = conn
	inc.mu.Unlock()
}

// Hand leaves ch for the loop, which takes it at its high watermark
// (Taken); until then it counts as awaited (Awaited).
func (inc *Handoff) Hand(ch *Chunk) {
	ch.handedAt = time.Now()
	inc.mu.Lock()
	inc.handed[ch.Seq] = ch
	inc.nHanded.Store(int32(len(inc.handed)))
	inc.mu.Unlock()
}

// Taken is the chunk handed under seq, which the loop takes at its high
// watermark (nil when none was: a replay, or a chunk already taken).
func (inc *Handoff) Taken(seq uint64) *Chunk {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	ch := inc.handed[seq]
	delete(inc.handed, seq)
	inc.nHanded.Store(int32(len(inc.handed)))
	return ch
}

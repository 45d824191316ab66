package incremental

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/internal/testhook"
	"github.com/pgfeldera/pgfeldera/snapshot"
	"github.com/pgfeldera/pgfeldera/state"
)

// Session is the stream loop's side of a session's incremental
// snapshots: the tables the state leaves incremental, and those
// resnapshot requests add while it streams. Only the loop touches it; what
// it shares with the worker is the Handoff.
type Session struct {
	cfg    Config
	hand   *Handoff
	rels   []*decode.Rel // per table in TABLES
	keys   []catalog.Key // per table in TABLES
	groups [][]int       // per route: the indexes of its tables
	tables []*Table      // being read, or queued

	loop *Loop     // the rule, fed by the stream loop
	rec  *Recorder // records the chunks durable in the state file

	stream Stream // the stream loop that holds the session (Start)
}

// Config is what a Session needs of the connector: its settings, the
// counters it moves, and the tests' hooks.
type Config struct {
	DSN         string // PG_DSN: the connections that read chunks
	Slot        string // PG_SLOT: whose watermarks and requests are the session's
	StateFile   string
	Never       bool // SNAPSHOT_MODE=never: requests are refused
	ChunkRows   int  // SNAPSHOT_CHUNK_ROWS (0: DefaultChunkRows)
	Parallelism int  // SNAPSHOT_PARALLELISM: the lanes of a table
	MaxBytes    int  // BATCH_MAX_BYTES: a chunk's and a retraction batch's bound
	Logger      *slog.Logger

	// Spool runs sql on Feldera (fenced) and spools its rows; table
	// names the table for errors (the worker's, for a retraction).
	Spool func(ctx context.Context, sql, table string) (*snapshot.Spool, error)

	// SnapshotRows and Retracted count the rows the chunks and the
	// retraction batches put in the outbox.
	SnapshotRows, Retracted *atomic.Int64
	// Copied and Progress are the counters of the Feldera table a route
	// feeds: rows copied, and the snapshot's progress.
	Copied   func(route int) *atomic.Int64
	Progress func(route int) *Progress

	Hooks *testhook.Hooks // the tests' seams; nil in production
}

// Stream is what a Session needs of the stream loop that holds it, given
// at Start.
type Stream struct {
	Ctx  context.Context // the worker's: the stream's flush context
	WG   *sync.WaitGroup // counts the worker's goroutine; the stream joins it
	Fail func(error)     // ends the session with the worker's error (an event)
	Wake func()          // wakes the stream loop out of a receive: a chunk was handed
	// WantKeys is the decoder's: per route, whether its changes carry
	// their keys (an open window's table).
	WantKeys []bool
	Timeout  time.Duration // a chunk's COPY that sends nothing for this long fails (0: none)
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

// ChunkRows is how many rows a chunk reads at most: SNAPSHOT_CHUNK_ROWS
// (n), else DefaultChunkRows.
func ChunkRows(n int) int {
	if n > 0 {
		return n
	}
	return DefaultChunkRows
}

// New plans the session's incremental snapshots from the state file: the
// tables it leaves incremental are queued for the worker. It is nil only
// without a state file (a first run under SNAPSHOT_MODE=never, which no
// request can change).
func New(ctx context.Context, cfg Config, p *catalog.Mapping, spare *Spare) (*Session, error) {
	st, err := state.Load(cfg.StateFile)
	if errors.Is(err, state.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fatal.Wrap(err)
	}
	if len(st.Tables) != len(p.Rels) {
		return nil, fatal.Wrap(fmt.Errorf("state file %s lists %d tables, TABLES %d", cfg.StateFile, len(st.Tables), len(p.Rels)))
	}
	inc := NewSession(cfg, st, p)
	// Every table's key is read now, so that a resnapshot request is
	// answered at once, in the stream loop, without a query. The
	// connection is kept for the worker when a table is left to read.
	conn := spare.Take()
	if conn == nil {
		if conn, err = Connect(ctx, cfg.DSN); err != nil {
			return nil, fmt.Errorf("incremental snapshot: %w", err)
		}
	}
	if inc.keys, err = Keys(ctx, p, conn); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if inc.cfg.Never {
		conn.Close(context.WithoutCancel(ctx))
		return inc, nil
	}
	for i, t := range st.Tables {
		if t.Status != state.Incremental {
			continue
		}
		k := inc.keys[i]
		if k.Err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return nil, k.Err
		}
		if t.Blocks == nil && t.After != nil && len(t.After) != len(k.Cols) {
			conn.Close(context.WithoutCancel(ctx))
			return nil, fatal.Wrap(fmt.Errorf("state file %s: table %s resumes after a key of %d values, its primary key has %d columns", cfg.StateFile, t.Source, len(t.After), len(k.Cols)))
		}
		inc.add(i)
	}
	if inc.hand.Queued() {
		inc.hand.SetConn(conn)
	} else {
		conn.Close(context.WithoutCancel(ctx))
	}
	return inc, nil
}

// NewSession is a session of the tables st records, none of them queued
// (New queues those the state leaves incremental) and no key read.
func NewSession(cfg Config, st *state.State, p *catalog.Mapping) *Session {
	return &Session{
		cfg:  cfg,
		hand: NewHandoff(ChunkRows(cfg.ChunkRows), cfg.Parallelism),
		rels: p.Rels, groups: p.Groups, loop: NewLoop(),
		rec: NewRecorder(st, cfg.StateFile, cfg.Logger, cfg.Progress),
	}
}

// Handoff is what the session shares with its worker.
func (inc *Session) Handoff() *Handoff { return inc.hand }

// Start attaches the session to the stream loop that holds it, and starts
// a worker when the state leaves a table to read.
func (inc *Session) Start(s Stream) {
	inc.stream = s
	inc.startWorker()
}

// add queues table i of TABLES for the worker, as the state now records
// it (the loop's call).
func (inc *Session) add(i int) {
	t := NewTable(i, inc.rels[i], inc.keys[i], inc.rec.St.Tables[i])
	inc.tables = append(inc.tables, t)
	inc.hand.Queue(t)
}

// table is the table TABLES lists at idx, if this snapshot reads it.
func (inc *Session) table(idx int) *Table {
	for _, t := range inc.tables {
		if t.Idx == idx {
			return t
		}
	}
	return nil
}

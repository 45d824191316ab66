package incremental

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/snapshot"
	"github.com/pgfeldera/pgfeldera/state"
)

// Incremental snapshots (SNAPSHOT_MODE=incremental): the slot
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

// Watermark is a logical message's content: a chunk's watermark, or a
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
	key    []catalog.KeyColumn // the primary key, in its order
	keyAt  []int               // per key column: its index in rel.Cols
	Copied int64               // rows this session put in the outbox, for the rate; the loop's
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

// Save is a chunk in the outbox: the state records it once the
// acknowledged position reaches LSN (the end of its high watermark's
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

// ChunkKey reads a table's primary key (its columns in index order and
// their types) and checks that it is the Feldera table's key: key-range
// chunks are ranges of the primary key's btree, and the reconciliation is
// by the Feldera key, so the two must be the same columns. (Block-range
// chunks would not need it; the refusal is kept for every table, so that
// a table's mode does not decide what is accepted.)
func ChunkKey(ctx context.Context, conn *pgx.Conn, rel *decode.Rel) ([]catalog.KeyColumn, []int, error) {
	t := rel.Target
	if !rel.Keyed() {
		return nil, nil, fatal.Wrap(fmt.Errorf("SNAPSHOT_MODE=incremental: Feldera table %s (from %s) has no PRIMARY KEY: a keyless table cannot be read in chunks exactly (a stream change to a row not yet copied would count it twice); declare a key or use SNAPSHOT_MODE=initial", t.Dest.Name, t.Qualified()))
	}
	pk, err := catalog.PrimaryKey(ctx, conn, t.Source())
	if err != nil {
		return nil, nil, err
	}
	key := pk
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
		return nil, nil, fatal.Wrap(fmt.Errorf("SNAPSHOT_MODE=incremental: table %s has primary key %s in Postgres, but Feldera table %s is keyed by (%s): chunks are ranges of the Postgres primary key and are reconciled by the Feldera key, so they must be the same columns (use SNAPSHOT_MODE=initial for this mapping)",
			t.Qualified(), pk, t.Dest.Name, strings.Join(fel, ", ")))
	}
	return key, at, nil
}

// take is the worker's next table; nil (and the worker stops) when the
// queue is empty.
func (inc *Handoff) take() *Table {
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

// Awaited is when the oldest chunk still waiting for its high watermark
// was handed; zero when none waits.
func (inc *Handoff) Awaited() time.Time {
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

// WatermarkNudge is how long a handed chunk's high watermark may take to
// reach the loop before the loop sends a status update, and then how
// often it sends one while the watermark has not come. The watermark is
// committed and flushed right after the chunk is handed, so it comes
// within milliseconds unless the stream is busy decoding what precedes
// it; a status update makes the walsender's socket readable, so a
// walsender asleep without having seen the flush looks again. Without it
// such a wait lasted until the next regular status update (the status
// interval, 10 s by default): CI saw a restart whose first chunk took
// 10.035 s, once, on PostgreSQL 16.
const WatermarkNudge = 500 * time.Millisecond

// NudgeAt is when the loop next sends a status update for a chunk handed
// at handed whose high watermark has not come: WatermarkNudge after the
// chunk was handed and after the last status update. ok is false when no
// chunk waits (handed is zero).
func NudgeAt(handed, lastStatus time.Time) (at time.Time, ok bool) {
	if handed.IsZero() {
		return time.Time{}, false
	}
	from := handed
	if lastStatus.After(from) {
		from = lastStatus
	}
	return from.Add(WatermarkNudge), true
}

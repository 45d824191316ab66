package connector

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/snapshot"
	"github.com/pgfeldera/pgfeldera/state"
)

// incSession is the stream loop's side of a session's incremental
// snapshots: the tables the state leaves incremental, and those
// resnapshot requests add while it streams. Only the loop touches it; what
// it shares with the worker is the Handoff.
type incSession struct {
	hand   *incremental.Handoff
	never  bool                 // SNAPSHOT_MODE=never: requests are refused
	rels   []*decode.Rel        // per table in TABLES
	keys   []incremental.Key    // per table in TABLES
	tables []*incremental.Table // being read, or queued

	loop *incremental.Loop     // the rule, fed by the stream loop
	rec  *incremental.Recorder // records the chunks durable in the state file
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
func (c *Connector) startIncremental(ctx context.Context, p *setup.Plan, rconn *pgconn.PgConn, mappings []snapshot.Mapping, old *state.State, slotExists, retract bool) error {
	// The connection that checks the keys is kept for the session's
	// worker to read chunks on (a connection costs a backend's start:
	// milliseconds on the path to the first chunk).
	conn, err := c.chunkConn(ctx)
	if err != nil {
		return fmt.Errorf("incremental snapshot: %w", err)
	}
	keys, err := chunkKeys(ctx, p, conn)
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
	created, err := snapshot.CreateSlot(ctx, rconn, c.cfg.Slot, false, c.srv.Failover)
	if err != nil {
		return err
	}
	if c.test.failAfterSlot {
		return fatal.Wrap(errors.New("test hook: stopped after creating the slot, before the state records it"))
	}
	for i := range st.Tables {
		st.Tables[i].Status, st.Tables[i].Retract = state.Incremental, retract
	}
	// The slot is this server's: recorded in this write, so that
	// recordServer has none of its own to do.
	st.SystemID, st.Timeline = c.srv.SystemID, c.srv.Timeline
	if err := state.Save(c.cfg.StateFile, st); err != nil {
		return fatal.Wrap(err)
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
func (c *Connector) newIncremental(ctx context.Context, p *setup.Plan) (*incSession, error) {
	st, err := state.Load(c.cfg.StateFile)
	if errors.Is(err, state.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fatal.Wrap(err)
	}
	if len(st.Tables) != len(p.Rels) {
		return nil, fatal.Wrap(fmt.Errorf("state file %s lists %d tables, TABLES %d", c.cfg.StateFile, len(st.Tables), len(p.Rels)))
	}
	inc := &incSession{
		hand:  incremental.NewHandoff(c.chunkRows(), c.cfg.SnapshotParallelism),
		never: c.cfg.SnapshotMode == SnapshotNever, rels: p.Rels, loop: incremental.NewLoop(),
		rec: incremental.NewRecorder(st, c.cfg.StateFile, c.logger, func(route int) *incremental.Progress {
			return &c.tableStats[route].Progress
		}),
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
	if inc.keys, err = chunkKeys(ctx, p, conn); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if inc.never {
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
			return nil, fatal.Wrap(fmt.Errorf("state file %s: table %s resumes after a key of %d values, its primary key has %d columns", c.cfg.StateFile, t.Source, len(t.After), len(k.Cols)))
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

// add queues table i of TABLES for the worker, as the state now records
// it (the loop's call).
func (inc *incSession) add(i int) {
	t := incremental.NewTable(i, inc.rels[i], inc.keys[i], inc.rec.St.Tables[i])
	inc.tables = append(inc.tables, t)
	inc.hand.Queue(t)
}

// table is the table TABLES lists at idx, if this snapshot reads it.
func (inc *incSession) table(idx int) *incremental.Table {
	for _, t := range inc.tables {
		if t.Idx == idx {
			return t
		}
	}
	return nil
}

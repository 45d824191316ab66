package incremental

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/replconn"
)

// startWorker starts a worker when tables are queued and none runs; an
// error of its ends the session through an event.
func (inc *Session) startWorker() {
	if !inc.hand.StartWorker() {
		return
	}
	w := inc.worker()
	s := inc.stream
	s.WG.Add(1)
	go func() {
		defer s.WG.Done()
		err := w.Run(s.Ctx)
		if err != nil && s.Ctx.Err() == nil {
			s.Fail(fmt.Errorf("incremental snapshot: %w", err))
		}
	}()
}

// worker is the session's incremental.Worker.
func (inc *Session) worker() *Worker {
	cfg := inc.cfg
	return &Worker{
		H: inc.hand, Slot: cfg.Slot, StateFile: cfg.StateFile, MaxBytes: cfg.MaxBytes,
		Timeout: inc.stream.Timeout, Rels: inc.rels, Groups: inc.groups,
		Connect: inc.connect, Spool: cfg.Spool, Starts: inc.tableStarts, Wake: inc.stream.Wake,
		Hooks: cfg.Hooks, Logger: cfg.Logger,
	}
}

// connect is the worker's Connect: a connection that reads chunks.
func (inc *Session) connect(ctx context.Context) (*pgx.Conn, error) { return Connect(ctx, inc.cfg.DSN) }

// Connect opens a connection that reads chunks, set up in one round
// trip: the pinned settings, and synchronous_commit.
//
// A watermark reaches the stream once its commit is flushed: under
// synchronous_commit = off that waits for the WAL writer (up to
// wal_writer_delay, 200 ms by default, per watermark), which measured 10
// times slower chunks. This connection flushes its own commits (local);
// any other setting is the server's and is kept.
func Connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	conn, err := replconn.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if _, err := conn.Exec(ctx, chunkConnSetup); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("set up a connection for chunks (%s): %w", chunkConnSetup, err)
	}
	return conn, nil
}

// chunkConnSetup is Connect's one query (the simple protocol: Exec
// without arguments).
var chunkConnSetup = strings.Join(replconn.PinnedGUCs, ";") +
	";SELECT set_config('synchronous_commit', 'local', false) WHERE current_setting('synchronous_commit') = 'off'"

// Spare holds a connection for chunks that startup opened (Prepare), for
// the session's incremental snapshot to take (New); the session closes it
// if nothing took it. The zero value holds none.
type Spare struct{ conn *pgx.Conn }

// Keep keeps conn, closing the one kept before.
func (sp *Spare) Keep(conn *pgx.Conn) {
	sp.Close()
	sp.conn = conn
}

// Take is the connection kept, or nil; it is no longer kept.
func (sp *Spare) Take() *pgx.Conn {
	conn := sp.conn
	sp.conn = nil
	return conn
}

// Close closes the connection kept, if any.
func (sp *Spare) Close() {
	if conn := sp.Take(); conn != nil {
		conn.Close(context.Background())
	}
}

// Prepare reads every table's key before an incremental snapshot's first
// run creates anything: a table that cannot be chunked is refused. The
// connection that checks the keys is kept in spare for the session's
// worker to read chunks on (a connection costs a backend's start:
// milliseconds on the path to the first chunk).
func Prepare(ctx context.Context, dsn string, p *catalog.Mapping, spare *Spare) error {
	conn, err := Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("incremental snapshot: %w", err)
	}
	keys, err := Keys(ctx, p, conn)
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return err
	}
	spare.Keep(conn)
	for _, k := range keys {
		if k.Err != nil {
			return k.Err
		}
	}
	return nil
}

// Keys is every table's key (incremental.ChunkKey), read once per
// session: a refusal is the table's err; a failed query is returned.
func Keys(ctx context.Context, p *catalog.Mapping, conn *pgx.Conn) ([]catalog.Key, error) {
	if p.Keys != nil {
		return p.Keys, nil
	}
	keys := make([]catalog.Key, len(p.Rels))
	for i, rel := range p.Rels {
		k := &keys[i]
		k.Cols, k.At, k.Err = ChunkKey(ctx, conn, rel)
		if k.Err != nil && !fatal.Is(k.Err) {
			return nil, k.Err
		}
	}
	p.Keys = keys
	return keys, nil
}

// tableStarts sets a table's progress metrics from the state and logs it.
func (inc *Session) tableStarts(ctx context.Context, conn *pgx.Conn, t *Table) {
	limit := int64(ChunkRows(inc.cfg.ChunkRows))
	st := t.Start
	var estimate float64
	_ = conn.QueryRow(ctx, "SELECT greatest(reltuples, 0) FROM pg_class WHERE oid = $1::regclass", t.Rel.Target.Source()).Scan(&estimate)
	ts := inc.cfg.Progress(t.Rel.Target.Route)
	ts.Estimate.Store(int64(estimate))
	left := (int64(estimate) - st.Copied + limit - 1) / limit
	ts.ChunksDone.Store(st.Chunks)
	ts.ChunksTotal.Store(st.Chunks + max(left, 1))
	inc.cfg.Logger.Info("snapshot: incremental: table to read", "table", st.Source, "chunks_done", st.Chunks, "rows_copied", st.Copied,
		"estimate", int64(estimate), "resume_after", strings.Join(st.After, ","), "retract_first", st.Retract)
}

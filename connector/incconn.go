package connector

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/setup"
)

// startWorker starts a worker when tables are queued and none runs; an
// error of its ends the session through an event.
func (s *stream) startWorker() {
	if !s.inc.hand.StartWorker() {
		return
	}
	w := s.worker()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := w.Run(s.flushCtx)
		if err != nil && s.flushCtx.Err() == nil {
			s.emit(event{kind: evChunk, err: fmt.Errorf("incremental snapshot: %w", err)})
		}
	}()
}

// worker is the session's incremental.Worker.
func (s *stream) worker() *incremental.Worker {
	c := s.c
	return &incremental.Worker{
		H: s.inc.hand, Slot: c.cfg.Slot, StateFile: c.cfg.StateFile, MaxBytes: c.cfg.BatchMaxBytes,
		Timeout: s.live.Timeout, Rels: s.inc.rels, Groups: s.plan.Groups,
		Connect: c.chunkConn, Spool: c.spoolQuery, Starts: s.tableStarts, Wake: s.wake.fire,
		Hooks: c.test.worker, Logger: s.logger,
	}
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

// chunkKeys is every table's key (chunkKey), read once per session: a
// refusal is the table's err; a failed query is returned.
func chunkKeys(ctx context.Context, p *setup.Plan, conn *pgx.Conn) ([]incremental.Key, error) {
	if p.Keys != nil {
		return p.Keys, nil
	}
	keys := make([]incremental.Key, len(p.Rels))
	for i, rel := range p.Rels {
		k := &keys[i]
		k.Cols, k.At, k.Err = incremental.ChunkKey(ctx, conn, rel)
		if k.Err != nil && !isFatal(k.Err) {
			return nil, k.Err
		}
	}
	p.Keys = keys
	return keys, nil
}

// tableStarts sets a table's progress metrics from the state and logs it.
func (s *stream) tableStarts(ctx context.Context, conn *pgx.Conn, t *incremental.Table) {
	limit := int64(s.c.chunkRows())
	st := t.Start
	var estimate float64
	_ = conn.QueryRow(ctx, "SELECT greatest(reltuples, 0) FROM pg_class WHERE oid = $1::regclass", t.Rel.Target.Source()).Scan(&estimate)
	ts := s.c.tableStats[t.Rel.Target.Route]
	ts.Estimate.Store(int64(estimate))
	left := (int64(estimate) - st.Copied + limit - 1) / limit
	ts.ChunksDone.Store(st.Chunks)
	ts.ChunksTotal.Store(st.Chunks + max(left, 1))
	s.logger.Info("snapshot: incremental: table to read", "table", st.Source, "chunks_done", st.Chunks, "rows_copied", st.Copied,
		"estimate", int64(estimate), "resume_after", strings.Join(st.After, ","), "retract_first", st.Retract)
}

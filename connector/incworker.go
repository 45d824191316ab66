package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/replconn"
)

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
		if t.Start.Retract {
			if err := s.retractTable(ctx, conn, t); err != nil {
				return err
			}
		}
		if t.Start.Retract && s.c.test.retractOnly {
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
func (inc *incSession) takeConn() *pgx.Conn {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	conn := inc.conn
	inc.conn = nil
	return conn
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
func (s *stream) hand(ctx context.Context, conn *pgx.Conn, ch *Chunk) error {
	s.put(ch)
	return s.emitWatermarks(ctx, conn, s.mark(ch.Table, ch.Seq, "high"))
}

// put leaves a chunk for the loop, which takes it at its high watermark,
// and wakes the loop, which then bounds its receive by the chunk's nudge
// (watermarkNudge).
func (s *stream) put(ch *Chunk) {
	ch.handedAt = time.Now()
	s.inc.mu.Lock()
	s.inc.handed[ch.Seq] = ch
	s.inc.nHanded.Store(int32(len(s.inc.handed)))
	s.inc.mu.Unlock()
	s.wake.fire() // a receive under way has no nudge deadline yet
}

// mark is a watermark of chunk seq of t.
func (s *stream) mark(t *Table, seq uint64, w string) Watermark {
	return Watermark{Slot: s.c.cfg.Slot, Run: s.inc.run, Chunk: seq, Table: t.Idx, W: w}
}

// emitWatermarks writes watermarks into the stream, in order, in one
// transaction (one simple query of several statements is one implicit
// transaction).
func (s *stream) emitWatermarks(ctx context.Context, conn *pgx.Conn, ws ...Watermark) error {
	if _, err := conn.Exec(ctx, WatermarkSQL(ws)); err != nil {
		return fmt.Errorf("write the %s watermark of chunk %d: %w", ws[0].W, ws[0].Chunk, err)
	}
	return nil
}

// WatermarkSQL is the statements that write ws, in order.
func WatermarkSQL(ws []Watermark) string {
	var q strings.Builder
	for _, w := range ws {
		b, _ := json.Marshal(w)
		q.WriteString("SELECT pg_logical_emit_message(true, '" + WatermarkPrefix + "', " + replconn.QuoteLiteral(string(b)) + "::text);")
	}
	return q.String()
}

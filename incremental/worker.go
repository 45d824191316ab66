package incremental

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/internal/testhook"
	"github.com/pgfeldera/pgfeldera/snapshot"
)

// Worker reads the queued tables in chunks on its own connections, hands
// each chunk to the stream loop through the Handoff and writes its
// watermarks. The session starts Run on a goroutine of its own and joins
// it; the lanes it starts (readLanes) end before Run returns.
type Worker struct {
	H         *Handoff
	Slot      string        // the slot whose watermarks these are
	StateFile string        // named in errors about its lanes
	MaxBytes  int           // BATCH_MAX_BYTES: a chunk's and a retraction batch's bound
	Timeout   time.Duration // a chunk's COPY that sends nothing for this long fails (0: none)
	Rels      []*decode.Rel // per table in TABLES
	Groups    [][]int       // per route: the indexes of its tables
	// Connect opens a connection for a lane (the first is the Handoff's).
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Spool runs sql on Feldera (fenced) and spools its rows; table names
	// the table for errors.
	Spool func(ctx context.Context, sql, table string) (*snapshot.Spool, error)
	// Starts sees each table as its read begins (progress metrics, a log
	// line), on the worker's connection.
	Starts func(ctx context.Context, conn *pgx.Conn, t *Table)
	// Wake wakes the stream loop out of a receive: a chunk was handed.
	Wake   func()
	Hooks  *testhook.Hooks // the tests' seams; nil in production
	Logger *slog.Logger
}

// Run reads the chunks, one table at a time, until every table queued is
// read (the queue is empty) or ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	inc := w.H
	conn := inc.TakeConn()
	if conn == nil {
		var err error
		if conn, err = w.Connect(ctx); err != nil {
			return err
		}
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for t := inc.take(); t != nil; t = inc.take() {
		w.Starts(ctx, conn, t)
		if t.Start.Retract {
			if err := w.retractTable(ctx, conn, t); err != nil {
				return err
			}
		}
		if t.Start.Retract && w.Hooks.Get().RetractOnly {
			continue
		}
		lanes, err := w.planLanes(ctx, conn, t)
		if err != nil {
			return err
		}
		if err := w.readLanes(ctx, conn, t, lanes); err != nil {
			return err
		}
	}
	return nil
}

// TakeConn is the connection kept for the first worker (SetConn), or
// nil.
func (inc *Handoff) TakeConn() *pgx.Conn {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	conn := inc.conn
	inc.conn = nil
	return conn
}

// answer is the loop's verdict on the chunk a lane handed before: true
// reads it again.
func (w *Worker) answer(ctx context.Context, reply chan bool) (bool, error) {
	select {
	case again := <-reply:
		return again, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// hand gives the loop a chunk, then writes its high watermark: the loop
// takes the chunk there.
func (w *Worker) hand(ctx context.Context, conn *pgx.Conn, ch *Chunk) error {
	w.put(ch)
	return w.emitWatermarks(ctx, conn, w.mark(ch.Table, ch.Seq, "high"))
}

// put leaves a chunk for the loop, which takes it at its high watermark,
// and wakes the loop, which then bounds its receive by the chunk's nudge
// (WatermarkNudge).
func (w *Worker) put(ch *Chunk) {
	w.H.Hand(ch)
	w.Wake() // a receive under way has no nudge deadline yet
}

// mark is a watermark of chunk seq of t.
func (w *Worker) mark(t *Table, seq uint64, which string) Watermark {
	return Watermark{Slot: w.Slot, Run: w.H.run, Chunk: seq, Table: t.Idx, W: which}
}

// emitWatermarks writes watermarks into the stream, in order, in one
// transaction (one simple query of several statements is one implicit
// transaction).
func (w *Worker) emitWatermarks(ctx context.Context, conn *pgx.Conn, ws ...Watermark) error {
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
		q.WriteString("SELECT pg_logical_emit_message(true, '" + WatermarkPrefix + "', " + pgvalue.QuoteLiteral(string(b)) + "::text);")
	}
	return q.String()
}

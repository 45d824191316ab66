package connector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/snapshot"
)

// run is the session's loop: apply what the session's goroutines
// reported and do what is due (tend), then read from the replication
// connection until the next thing is due.
func (s *stream) run(ctx context.Context) error {
	var ev decode.Event
	var rc replconn.RecvCtx
	defer rc.Release()
	s.nextStatus = time.Now()
	live, alert := ctx, s.alertCtx // what ends the loop, and what wakes a receive
	for {
		if live.Err() != nil {
			if live == ctx && s.midTransaction() {
				var cancel context.CancelFunc
				live, cancel = s.finishTxn()
				defer cancel()
				alert = live
				continue
			}
			return s.shutdown()
		}
		if live != ctx && !s.pipe.Open() {
			return s.shutdown() // the source transaction the stop came in ended
		}
		base := s.wake.arm(alert) // armed before the drain: an event sent after it wakes the receive
		now, nudge, err := s.tend()
		if err != nil {
			return err
		}
		// The filling batch is full and cannot be sent yet (a POST runs,
		// or BATCH_MAX_IN_FLIGHT batches are in flight): stop reading
		// (the memory bound) but keep reporting.
		if s.pipe.Full() && !s.pipe.CanPost() {
			if err := s.waitEvent(); err != nil {
				return err
			}
			continue
		}
		deadline, err := s.receiveBy(now, nudge)
		if err != nil {
			return err
		}
		if err := s.receive(live, &rc, base, deadline, &ev); err != nil {
			return err
		}
	}
}

// tend applies the events the session's goroutines sent, records chunk
// progress, ends the session when the pipeline was lost or the gate
// stalled, applies a new checkpoint, sends the filling batch and status
// updates when due, and nudges the walsender for a late high watermark.
// It returns when it looked and the next nudge (zero: none waits).
func (s *stream) tend() (now, nudge time.Time, err error) {
	if err := s.collect(); err != nil {
		return now, nudge, err
	}
	if s.inc != nil {
		if err := s.saveChunks(false); err != nil {
			return now, nudge, err
		}
	}
	select {
	case err := <-s.lost:
		return now, nudge, fromFeldera(err)
	default:
	}
	if err := s.stalledGate(); err != nil {
		return now, nudge, err
	}
	if moved, err := s.checkpointed(); err != nil {
		return now, nudge, err
	} else if moved {
		if err := s.status(); err != nil {
			return now, nudge, err
		}
	}
	now = time.Now()
	if err := s.quietEnd(now); err != nil {
		return now, nudge, err
	}
	if s.pipe.CanPost() && s.pipe.FlushDue(now) {
		s.pipe.Seal(false)
	}
	if !now.Before(s.nextStatus) {
		if err := s.status(); err != nil {
			return now, nudge, err
		}
	}
	// A chunk whose high watermark is late: nudge the walsender (see
	// incremental.WatermarkNudge), and look again no later than the next nudge.
	if s.inc == nil {
		return now, nudge, nil
	}
	handed := s.inc.Handoff().Awaited()
	nudge, waiting := incremental.NudgeAt(handed, s.lastStatus)
	if !waiting {
		return now, time.Time{}, nil
	}
	if !now.Before(nudge) {
		s.logger.Debug("snapshot: incremental: a chunk's high watermark has not come: status update sent to wake the walsender", "waited", now.Sub(handed).Round(time.Millisecond))
		if err := s.status(); err != nil {
			return now, nudge, err
		}
		nudge, _ = incremental.NudgeAt(handed, s.lastStatus)
	}
	return now, nudge, nil
}

// receiveBy is when the next receive must return: the next status
// update, a look at the watcher's checkpoint while work waits for one,
// the filling batch's linger, the next nudge, or the heartbeat's next
// look, whichever comes first. The heartbeat may end the session.
func (s *stream) receiveBy(now, nudge time.Time) (time.Time, error) {
	deadline := s.nextStatus
	if s.pipe.Queued() && now.Add(delivery.CheckpointPoll).Before(deadline) {
		deadline = now.Add(delivery.CheckpointPoll) // look at the watcher's checkpoint
	}
	if ld, ok := s.pipe.LingerDeadline(); ok && ld.Before(deadline) {
		deadline = ld
	}
	if ld, ok := s.pipe.RowOnlyAt(); ok && ld.Before(deadline) {
		deadline = ld
	}
	if !nudge.IsZero() && nudge.Before(deadline) {
		deadline = nudge
	}
	look, err := s.heartbeat(now)
	if err != nil {
		return deadline, err
	}
	if !look.IsZero() && look.Before(deadline) {
		deadline = look
	}
	return deadline, nil
}

// receive reads one message, or returns at deadline (or when base is
// canceled: an event or a lost pipeline) with nothing read.
func (s *stream) receive(ctx context.Context, rc *replconn.RecvCtx, base context.Context, deadline time.Time, ev *decode.Event) error {
	msg, err := s.src.ReceiveMessage(rc.Get(base, deadline))
	if err != nil {
		if ctx.Err() != nil {
			return nil // shutdown at the top of the loop
		}
		if pgconn.Timeout(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			rc.Release()
			return nil
		}
		return fromPostgres(fmt.Errorf("receive: %w", err))
	}
	s.live.HeardAt(time.Now())
	switch m := msg.(type) {
	case *pgproto3.CopyData:
		return s.handle(m.Data, ev)
	case *pgproto3.ErrorResponse:
		return fmt.Errorf("replication: %w", pgconn.ErrorResponseToPgError(m))
	case *pgproto3.CopyDone:
		return ErrStreamEnded
	}
	return nil // NoticeResponse and friends: nothing to do
}

func (s *stream) handle(data []byte, ev *decode.Event) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("keepalive: %w", err)
		}
		// Nothing open, nothing buffered, nothing in flight: every byte
		// below ServerWALEnd was read, so idle slots release WAL (writes
		// to unpublished tables move the WAL head too).
		idle := !s.pending()
		moved := s.pipe.Keepalive(pkm.ServerWALEnd, time.Now())
		if idle && replconn.IdleKeepalive(pkm.ServerWALEnd, s.c.srv.WALEnd) {
			s.c.healthy = time.Now()
		}
		if pkm.ReplyRequested && !moved {
			return s.status()
		}
		return s.ack(moved)
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("xlogdata: %w", err)
		}
		// Received position uses WALStart, never ServerWALEnd (the server's
		// head, which we have not read).
		if xld.WALStart > s.received {
			s.received = xld.WALStart
			s.c.stats.Received.Store(uint64(xld.WALStart))
		}
		if s.pipe.Drops(xld.WALData) {
			return nil // Feldera holds its transaction (skip.go)
		}
		if len(xld.WALData) > 0 && xld.WALData[0] != 'C' && s.pipe.Full() && s.pipe.CanPost() {
			// A full batch is sealed when the next change arrives, not at
			// the change that filled it: when that change was its
			// transaction's last, the COMMIT still goes in, and the batch
			// holds whole transactions (no Feldera transaction needed).
			s.pipe.Seal(false)
		}
		if err := s.dec.Decode(xld.WALData, s.pipe.Filling(), ev); err != nil {
			return fmt.Errorf("decode at %s: %w", xld.WALStart, err)
		}
		return s.event(ev)
	}
	return nil
}

func (s *stream) event(ev *decode.Event) error {
	if s.inc != nil {
		if err := s.incEvent(ev); err != nil {
			return err
		}
	} else if ev.Kind == decode.KindMessage && ev.Message.Prefix == incremental.WatermarkPrefix {
		s.logger.Warn("resnapshot: ignoring a request: there is no state file yet (SNAPSHOT_MODE=never, first run), so nothing could record it", "lsn", ev.Message.LSN)
	}
	switch ev.Kind {
	case decode.KindBegin:
		s.openCommit = ev.Begin.FinalLSN
		if _, below := s.pipe.Skipped(); s.pipe.Begin(ev.Begin.FinalLSN) {
			n, _ := s.pipe.Skipped()
			s.logger.Info("progress: skipped the source transactions Feldera held; streaming", "transactions", n, "progress_lsn", below)
		}
	case decode.KindCommit:
		if s.pipe.OpenRows() {
			s.clock.Commit(ev.Commit.EndLSN, ev.Commit.CommitTime)
		}
		// A COMMIT records how far a flush may move the position, or,
		// with nothing buffered, moves it once what was sent before it
		// is durable. Only the second needs publishing: a recorded
		// COMMIT moves nothing.
		moved, publish := s.pipe.Commit(ev.Commit.EndLSN, time.Now())
		if publish {
			if err := s.ack(moved); err != nil {
				return err
			}
		}
		if s.pipe.SealAtCommit() {
			s.pipe.Seal(false) // an open Feldera transaction ends at the source COMMIT
		}
	case decode.KindRows:
		s.pipe.Rows(ev.Route, ev.Rows, time.Now())
		s.c.stats.StreamRows.Add(int64(ev.Rows))
		ts := s.c.tableStats[ev.Route]
		ts.Deletes.Add(int64(ev.Deletes))
		ts.Inserts.Add(int64(ev.Rows - ev.Deletes))
	case decode.KindRelation:
		for _, w := range ev.Warnings {
			s.logger.Warn(w)
		}
		return s.relationShape(ev.Rel)
	case decode.KindTruncate:
		return s.truncate(ev.Truncated)
	}
	return nil
}

// truncate retracts every row of the truncated tables in Feldera, durably,
// before anything after the TRUNCATE is sent. Rows of those tables still
// in the filling batch are discarded: the source discarded them too.
func (s *stream) truncate(rels []*decode.Rel) error {
	names := make([]string, len(rels))
	for i, r := range rels {
		names[i] = r.Target.Qualified()
	}
	rels, err := snapshot.TruncatedRoutes(rels, s.plan.Groups)
	if err != nil {
		return err
	}
	for _, r := range rels {
		s.pipe.Truncated(r.Target.Route)
	}
	s.logger.Info("truncate: retracting every row in Feldera", "tables", strings.Join(names, ","))
	// Rows sent before the TRUNCATE must land before the keys are read:
	// an open Feldera transaction commits first.
	if err := s.closeTxn(); err != nil {
		return err
	}
	if err := s.drain(); err != nil {
		return err
	}
	for _, r := range rels {
		// What the TRUNCATE emptied before sending depends on the
		// batches: not counted past the row (delivery/txncount.go).
		if err := s.c.txns.Retracted(r.Target.Dest.CanonicalName()); err != nil {
			return err
		}
	}
	s.pipe.Retract(func(ctx context.Context) (uint64, error) {
		for _, r := range rels {
			if err := s.c.loader.RetractAll(ctx, s.plan.Routes, r); err != nil {
				return 0, fmt.Errorf("truncate of %s: %w", r.Target.Qualified(), err)
			}
		}
		return s.c.out.SyncStep(), nil
	})
	if err := s.drain(); err != nil {
		return err
	}
	if s.pipe.Filling().Total == 0 {
		// Every buffered row was of the truncated tables: the COMMITs
		// they carried need nothing more.
		s.pipe.Emptied(time.Now())
		s.advance()
		s.publishWait()
	}
	return nil
}

// emit hands an event to the stream loop and wakes it.
func (s *stream) emit(ev event) {
	s.events <- ev // never blocks: see the channel's capacity
	s.wake.fire()
}

// collect applies every event already sent.
func (s *stream) collect() error {
	for {
		select {
		case ev := <-s.events:
			if err := s.apply(ev); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// waitEvent blocks until an event arrives and applies it, sending status
// updates on schedule meanwhile (a silent wait longer than
// wal_sender_timeout would get the connection closed). It reads nothing,
// so the heartbeat counts again from its end.
func (s *stream) waitEvent() error {
	defer func() { s.live.HeardAt(time.Now()) }()
	for {
		t := time.NewTimer(time.Until(s.nextStatus))
		select {
		case ev := <-s.events:
			t.Stop()
			return s.apply(ev)
		case <-t.C:
			if err := s.status(); err != nil {
				return err
			}
		}
	}
}

// closeTxn commits an open Feldera transaction: the filling batch (empty
// or not) goes out as its last part, after the POST that runs.
func (s *stream) closeTxn() error {
	for s.pipe.Posting() {
		if err := s.waitEvent(); err != nil {
			return err
		}
	}
	if s.pipe.TxnOpen() {
		s.pipe.Seal(true)
	}
	return nil
}

// drain waits until nothing is in flight: every batch sent completed and
// any retraction ended.
func (s *stream) drain() error {
	for s.pipe.Busy() {
		if err := s.waitEvent(); err != nil {
			return err
		}
	}
	return nil
}

// apply is the loop's side of an event: the pipeline applies its own
// (delivery.Pipeline.Apply) and says whether the position moved. Any
// failure ends the session, which drops everything in flight: the next
// one replays it from the slot.
func (s *stream) apply(ev event) error {
	if ev.chunk != nil {
		return ev.chunk
	}
	moved, err := s.pipe.Apply(ev.out)
	if err != nil {
		if ev.out.Kind == delivery.Retracted {
			return err
		}
		return fromFeldera(err) // a POST or a completion: Feldera's side
	}
	if ev.out.Kind == delivery.Posted {
		s.stage(StageSent, ev.out.Batch.AckTo)
	}
	return s.ack(moved)
}

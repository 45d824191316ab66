package connector

import (
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/failover"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/setup"
)

// pending reports whether anything read is not yet acknowledged.
func (s *stream) pending() bool { return s.pipe.Pending() }

// ack publishes what the ledger's last rule did (moved: the position
// moved) and sends the status update that carries a moved position.
func (s *stream) ack(moved bool) error {
	s.advance()
	s.publishWait()
	if moved {
		return s.status()
	}
	return nil
}

// checkpointed applies the newest checkpoint the watcher saw; it reports
// whether the position moved. A checkpoint that covers more than the last
// one is first recorded in the state file (recordCheckpoint): a restart
// must restore it, or a later one, before anything it covers was
// acknowledged.
func (s *stream) checkpointed() (bool, error) {
	if !s.pipe.Queued() {
		return false, nil
	}
	moved, err := s.pipe.Checkpointed(s.c.cp.Steps.Load(), time.Unix(0, s.c.cp.SeenAt.Load()), s.recordCheckpoint)
	if err != nil {
		return false, err
	}
	s.advance()
	s.publishWait()
	return moved, nil
}

// recordCheckpoint writes the session's newest fresh checkpoint into the
// state file. The first one after a program change under exactly_once
// also closes the journal gap: Feldera journals its input again, and
// everything completed is durable (up to the checkpoint by it, after it
// by the journal), so the gate goes back to completion.
func (s *stream) recordCheckpoint() error {
	cps := s.c.cp.Last.Load()
	if s.inc == nil || cps == nil {
		return nil
	}
	cp := setup.CheckpointRef(*cps)
	gap, err := s.inc.Checkpoint(cp)
	if err != nil {
		return err
	}
	if gap && s.plan.Model == feldera.FTExactlyOnce && s.c.test.ForceGate == nil {
		s.pipe.AckAtCompletion()
		s.c.gate.Store(int32(delivery.GateComplete))
		s.logger.Info("feldera: a checkpoint since the program change: Feldera journals its input again; acknowledging at completion", "checkpoint", cp.UUID)
	}
	return nil
}

// stalledGate ends the process when completed work has waited
// NO_PROGRESS_TIMEOUT for a checkpoint: checkpoints that never come (or
// fail) would otherwise keep the session streaming, acknowledging
// nothing, while the primary retains WAL without bound. Only that wait
// counts: a source transaction or a commit that takes long is progress
// of its own, bounded elsewhere.
func (s *stream) stalledGate() error {
	at, ok := s.pipe.Waiting()
	if !ok || time.Since(at) <= s.c.cfg.NoProgressTimeout {
		return nil
	}
	why := "no Feldera checkpoint came"
	if e := s.c.cp.Error.Load(); e != nil && s.c.cp.Failed.Load() {
		why = "Feldera's checkpoints fail: " + *e
	}
	return &FatalError{Err: fmt.Errorf("%w for %s (NO_PROGRESS_TIMEOUT): completed work waited that long for a checkpoint to cover it (%s), so nothing could be acknowledged and the slot retained WAL", ErrNoProgress, time.Since(at).Round(time.Second), why)}
}

// publishWait tells the watcher since when completed work waits for a
// checkpoint (it may ask for one) and the status how long.
func (s *stream) publishWait() {
	// The WAL figure first: a look that sees work waiting reads the
	// figure of that work, not of the work before.
	s.c.cp.WAL.Store(int64(s.pipe.WaitingWAL()))
	if at, ok := s.pipe.Waiting(); ok {
		s.c.cp.Waits.Store(at.UnixNano())
	} else {
		s.c.cp.Waits.Store(0)
	}
}

// noteSent records how far in the WAL Feldera may hold changes once the
// filling batch is sent (the failover check, diverged, which finds a
// phantom when this lies past the new timeline's fork): every change sent
// belongs to a transaction whose commit record ends at or before it. A
// COMMIT message is read at its commit's end, so the last record read
// bounds the transactions the batch holds whole. Rows of the open
// transaction arrive at its commit record's start (the walsender decodes a
// transaction at its commit), and a fork exactly there leaves that commit
// out: its end lies at least one byte further.
func (s *stream) noteSent(openRows bool) pglogrepl.LSN {
	high := failover.SentBound(s.received, s.openCommit, openRows)
	if high > s.c.sentHigh {
		s.c.sentHigh = high
	}
	return high
}

// advance publishes the ledger's position: the stages' clock, the
// connector's copy of the acknowledged position and its statistics.
func (s *stream) advance() {
	lsn := s.pipe.Acked()
	s.c.step.Store(s.pipe.Step())
	s.stage(StageComplete, s.pipe.CompletedTo())
	s.stage(StageDurable, lsn)
	if lsn > s.c.acked {
		s.c.acked = lsn
		s.c.ackMoves++
		s.c.healthy = time.Now()
		s.c.stats.Acked.Store(uint64(lsn))
	}
	if lsn > s.received {
		s.received = lsn
		s.c.stats.Received.Store(uint64(lsn))
	}
}

func (s *stream) status() error { return s.statusAsking(false) }

// stage moves a stage of the source transactions' clock to lsn (0: none).
func (s *stream) stage(st Stage, lsn pglogrepl.LSN) {
	if lsn != 0 {
		s.clock.Reach(st, lsn, time.Now(), s.c.observer.Stage)
	}
}

// statusAsking sends a status update; reply asks the server to answer at
// once (a keepalive), which the heartbeat uses. It is the one place a
// status update is sent, so the one place the acknowledged position
// reaches Postgres: an update that carries a position past the last one
// sent passes after_ack, whichever rule moved the position (a completion,
// a checkpoint, a COMMIT with nothing buffered, an idle keepalive).
func (s *stream) statusAsking(reply bool) error {
	if err := s.markKept(); err != nil {
		return err
	}
	if err := s.src.SendStatus(s.received, s.c.acked, s.c.acked, reply); err != nil {
		return fromPostgres(fmt.Errorf("send status update: %w", err))
	}
	if s.c.acked > s.sentAck {
		s.sentAck = s.c.acked
		crashtest.Point("after_ack")
	}
	s.stage(StageAcked, s.c.acked)
	s.lastStatus = time.Now()
	s.nextStatus = s.lastStatus.Add(s.interval)
	return nil
}

// heartbeat applies the liveness rule at now: it asks the server for a
// reply half the timeout after the last message, ends the session as
// silent at the timeout, and returns when to look again.
func (s *stream) heartbeat(now time.Time) (time.Time, error) {
	ask, dead, at := s.live.Next(now)
	switch {
	case dead:
		return at, &replconn.SilentError{For: now.Sub(s.live.Heard)}
	case ask:
		s.logger.Debug("session: the replication connection has been quiet for half its timeout: asking the server for a reply", "quiet", now.Sub(s.live.Heard).Round(time.Millisecond))
		return at, s.statusAsking(true)
	}
	return at, nil
}

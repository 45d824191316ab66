package connector

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/failover"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/setup"
)

// stream is one replication session. Its goroutine owns the connection
// and the positions it reads; the sending side, from the batch the
// decoder fills to the acknowledged position, is its pipeline's.
type stream struct {
	c        *Connector
	plan     *setup.Plan
	src      replSource // the replication connection
	dec      *decode.Decoder
	pipe     *delivery.Pipeline // the sending side, and the only feeder of the ledger
	interval time.Duration
	logger   *slog.Logger

	openCommit pglogrepl.LSN // where the open transaction commits (BEGIN's final LSN)
	received   pglogrepl.LSN // highest WAL position read
	markedKept bool          // the state file says the slot keeps behind the progress row (markKept)
	events     chan event
	wake       waker
	wg         sync.WaitGroup // the incremental worker's

	flushCtx context.Context // outlives a graceful stop up to STOP_TIMEOUT, not the session
	abort    context.CancelFunc

	nextStatus time.Time
	lastStatus time.Time         // when the last status update was sent
	sentAck    pglogrepl.LSN     // the flush position the last status update carried
	lost       <-chan error      // the Feldera pipeline restarted or lost its state
	alertCtx   context.Context   // canceled when lost has something: ends a receive
	watcher    *delivery.Watcher // the pipeline watcher: restarts, redeploys, checkpoints
	live       replconn.Liveness // the replication connection's heartbeat
	clock      StageClock        // times each source transaction to each stage

	inc *incremental.Session // the incremental snapshot under way, nil when none
}

func (c *Connector) session(ctx context.Context) error {
	c.out.ResetSyncStep() // steps of an earlier session may belong to a state Feldera rolled back
	c.fence.Taken.Reset() // read again before the session's first counted POST
	p, err := c.prepare(ctx, setup.ForRun)
	if err != nil {
		return err
	}
	c.txns.Incarnation = p.Incarnation
	progress := c.setProgress(p)
	if err := c.countPast(p, progress); err != nil {
		return err
	}
	// A Feldera transaction left open (by a failed session, or a process
	// that crashed) is dealt with before anything else is sent: committed,
	// or, with the progress row, joined by the replay (skip.go). A
	// snapshot or a retraction commits a joined one first: it waits for
	// completions, which the transaction would hold back.
	if err := c.txns.Settle(ctx, c.joinTables(p, progress)); err != nil {
		return err
	}
	st := c.starter()
	if progress && !c.test.NoReset {
		st.ResetProgress, st.ReadProgress = c.out.PutProgress, c.out.ReadProgress
		st.ProgressFingerprint = setup.Fingerprint(*p.Progress)
	}
	if progress {
		st.Identified = func(srv failover.Server) { c.out.Progress.Keyed(srv.SystemID, srv.Database) }
	}
	conn, err := st.OpenReplication(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	defer c.spare.Close()
	if err := c.begin(ctx, st, p, conn); err != nil {
		return err
	}
	inc, err := incremental.New(ctx, c.incConfig(), &p.Mapping, &c.spare)
	if err != nil {
		return err
	}
	if inc != nil {
		// The connection incremental.New kept for the first worker, when
		// no worker took it (the session ended first). Deferred, so that
		// a session failing before its loop does not leak it.
		defer func() {
			if conn := inc.Handoff().TakeConn(); conn != nil {
				conn.Close(context.WithoutCancel(ctx))
			}
		}()
	}
	skip, err := c.readProgress(ctx, p)
	if err != nil {
		return err
	}
	if err := c.startReplication(ctx, st, p, conn); err != nil {
		return err
	}
	s := c.newStream(p, pgSource{conn}, inc)
	if err := s.skipBelow(skip); err != nil {
		return err
	}
	// While the stream sends, a failure leaves its Feldera transaction
	// for the next session to join, where that is harmless.
	c.out.Rejoin = c.joinTables(p, progress) != nil
	defer func() { c.out.Rejoin = false }()
	return s.serve(ctx)
}

// newStream is the session's loop state, starting at the slot's position.
func (c *Connector) newStream(p *setup.Plan, src replSource, inc *incremental.Session) *stream {
	dec := decode.NewDecoder(p.Targets)
	dec.RequirePrimaryKey = c.cfg.RequirePrimaryKey && p.Progress == nil // the progress table keeps keyless tables exact
	dec.Options = decodeOptions(c.cfg, p.Types, c.nulled)
	s := &stream{
		c: c, plan: p, src: src, dec: dec,
		interval: replconn.StatusInterval(p.WALTimeout),
		live:     replconn.Liveness{Timeout: c.replicationTimeout(p), Heard: time.Now()},
		logger:   c.logger,
		sentAck:  c.acked, // the slot's: a status repeating it moves nothing
		inc:      inc,
		events:   make(chan event, delivery.EventBuffer),
	}
	// Under exactly_once a completion is acknowledged once the watcher
	// saw the session's process after it (the ledger confirms).
	s.pipe = delivery.NewPipeline(len(p.Routes), p.Gate, c.acked, p.Model == feldera.FTExactlyOnce)
	s.pipe.Sender, s.pipe.Poll, s.pipe.Targets = c.out, c.sink, p.Routes
	s.pipe.Bounds, s.pipe.Linger, s.pipe.MaxFlight = c.bounds(), c.cfg.BatchLinger, c.cfg.BatchMaxInFlight
	s.pipe.Interval, s.pipe.Mode, s.pipe.Accepted = s.interval, c.cfg.Transactions, c.cfg.AckMode == AckAccepted
	s.pipe.Emit = func(e delivery.Event) { s.emit(event{out: e}) }
	s.pipe.Sealed, s.pipe.Logger = s.noteSent, c.logger
	// The steps a snapshot or retraction at startup waited for: a
	// position reached before anything of the session completes waits
	// for a checkpoint to cover them too.
	s.pipe.Stepped(c.out.SyncStep())
	if c.txns.Held() {
		// Joined: the replay goes on in the transaction a crash left open
		// (delivery.Join).
		s.pipe.Joined(c.srv.WALEnd)
	}
	if inc != nil {
		dec.WantKeys = make([]bool, len(p.Routes))
	}
	return s
}

// serve runs the session's loop with the goroutines it owns: the
// completer, the incremental worker and the pipeline watcher. It starts
// them and joins every one before it returns, so none outlives its
// session.
func (s *stream) serve(ctx context.Context) error {
	c := s.c
	s.flushCtx, s.abort = context.WithCancel(c.stopContext(ctx))
	defer s.abort()
	s.pipe.Start(s.flushCtx, s.completer())
	if s.inc != nil {
		s.inc.Start(s.incStream()) // starts a worker when the state leaves a table to read
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	var alert context.CancelFunc
	s.alertCtx, alert = context.WithCancel(ctx)
	defer alert()
	var watched sync.WaitGroup
	pw := &setup.PartitionWatch{DSN: c.cfg.DSN, Plan: s.plan, Logger: c.logger, IgnoreShape: c.test.IgnoreShape}
	s.watcher = c.newWatcher(s.plan)
	s.watcher.Also = pw.Every
	s.lost = s.watcher.Start(watchCtx, &watched, alert, s.wake.fire)
	defer func() {
		stopWatch()
		watched.Wait() // the watcher moves its pipeline: it ends first
		pw.Close()
	}()
	c.stats.Sessions.Add(1)
	c.logger.Info("session: streaming", "publication", c.cfg.Publication, "tables", len(s.plan.Targets),
		"status_interval", s.interval, "ack_mode", c.cfg.AckMode, "batch_max_rows", c.cfg.BatchMaxRows, "batch_max_bytes", c.cfg.BatchMaxBytes, "batch_max_in_flight", c.cfg.BatchMaxInFlight, "linger", c.cfg.BatchLinger)
	c.health.streaming.Store(true)
	err := s.run(ctx)
	c.health.streaming.Store(false)
	c.health.flushSince.Store(0)
	s.abort()
	s.wg.Wait()   // the incremental worker never outlives its session,
	s.pipe.Wait() // nor do the poster, the completer and a retraction
	c.out.AbandonTxn()
	return err
}

// midTransaction reports whether part of the open source transaction
// went out, or sits in the filling batch: sent as it is, views would see
// part of it.
func (s *stream) midTransaction() bool {
	return s.pipe.Open() && (s.pipe.TxnOpen() || s.pipe.OpenRows())
}

// finishTxn is how long a graceful stop that came inside a source
// transaction reads on to its COMMIT, so that it commits whole: half of
// STOP_TIMEOUT, which leaves the other half to send and commit it. The
// walsender sends a transaction only once it committed, so the rest of
// it is already on its way.
func (s *stream) finishTxn() (context.Context, context.CancelFunc) {
	s.logger.Info("session: stopping inside a source transaction that went out in part: reading on to its COMMIT, so that it commits whole",
		"commit_lsn", s.openCommit, "for_at_most", s.c.cfg.StopTimeout/2)
	return context.WithTimeout(s.flushCtx, s.c.cfg.StopTimeout/2)
}

// shutdown is the graceful stop: flush what was read, wait for completion,
// send the final status, and confirm on a second connection that the slot
// moved. Stopped inside a source transaction it could not finish (half of
// STOP_TIMEOUT ran out), it commits the part it read, and says so.
func (s *stream) shutdown() error {
	if s.midTransaction() {
		s.c.txns.NotePart(s.c.txns.ID(), fmt.Sprintf("stopping inside source transaction %s, which did not end within half of STOP_TIMEOUT: the part read is committed, so that no Feldera transaction is left open, and the next start replays the rest", s.openCommit))
	}
	s.logger.Info("session: stopping: flushing what was read")
	if err := s.closeTxn(); err != nil {
		return err
	}
	if err := s.drain(); err != nil {
		return err
	}
	if s.pipe.Filling().Total > 0 {
		s.pipe.Seal(true)
		if err := s.drain(); err != nil {
			return err
		}
	} else {
		s.pipe.Emptied(time.Now())
		s.advance()
		s.publishWait()
	}
	if s.pipe.Queued() {
		// at_least_once: what completed is durable once a checkpoint
		// covers it. Ask for one and wait (up to STOP_TIMEOUT); what is
		// still uncovered then is replayed by the next start.
		if err := s.watcher.AwaitCheckpoint(s.c.stopContext(context.Background()), s.pipe.HighestPending()); err != nil {
			s.logger.Warn("session: stopping: no checkpoint covers the last batches; the next start replays them", "err", err)
		}
		if _, err := s.checkpointed(); err != nil {
			return err
		}
	}
	if err := s.status(); err != nil {
		return err
	}
	if s.inc != nil {
		if err := s.saveChunks(true); err != nil {
			return err
		}
	}
	if s.c.acked == 0 {
		return nil
	}
	return s.c.confirm(s.c.acked)
}

// stopContext is what outlives a graceful stop, up to STOP_TIMEOUT: the
// hard-stop context of Run, or (outside Run) ctx without its cancellation.
func (c *Connector) stopContext(ctx context.Context) context.Context {
	if c.hardStop != nil {
		return c.hardStop
	}
	return context.WithoutCancel(ctx)
}

// confirm waits up to 5 s for confirmed_flush_lsn to reach lsn
// (replconn.AwaitConfirmed): the protocol does not acknowledge a status
// update.
func (c *Connector) confirm(lsn pglogrepl.LSN) error {
	ctx, cancel := context.WithTimeout(c.stopContext(context.Background()), 5*time.Second)
	defer cancel()
	confirmed, err := replconn.AwaitConfirmed(ctx, c.cfg.DSN, c.cfg.Slot, lsn)
	if err == nil {
		c.logger.Info("session: stopped; final acknowledgement confirmed by the slot", "confirmed_flush_lsn", confirmed)
		return nil
	}
	c.logger.Warn("session: stopped, but the final acknowledgement was not confirmed: a restart will redeliver from the slot (harmless with primary keys)", "want", lsn, "err", err)
	return nil
}

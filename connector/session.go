package connector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/snapshot"
)

// stream is one replication session. Its goroutine owns the connection and
// every position; the flusher goroutine only sees the batch it was handed.
type stream struct {
	c        *Connector
	plan     *plan
	conn     *pgconn.PgConn
	dec      *decode.Decoder
	targets  []*decode.Target // per route: its Feldera table (see plan.routes)
	groups   [][]int          // per route: how many sources share it (plan.groups)
	interval time.Duration
	logger   *slog.Logger

	open       bool          // inside BEGIN … COMMIT
	openRows   bool          // the filling batch holds rows of the open transaction
	openRecs   int           // records of the open transaction decoded so far
	openCommit pglogrepl.LSN // where the open transaction commits (BEGIN's final LSN)
	received   pglogrepl.LSN // highest WAL position read
	filling    *batch
	spare      *batch // nil while a POST reads it
	posting    bool   // a POST runs: at most one, in source order (see inflight.go)
	retracting bool   // a retraction job runs: nothing is in flight meanwhile
	// txnOpen: the last batch sent left a Feldera transaction open (it
	// ended inside a source transaction); the next one continues it.
	txnOpen      bool
	warnedTxnCut bool
	maxFlight    int // BATCH_MAX_IN_FLIGHT
	// Rows and bytes sent and not yet complete, per batch id and in all:
	// kept under what Feldera buffers per ingress endpoint (see canPost).
	flightSize  map[uint64][2]int
	flightRows  int
	flightBytes int
	seq         int
	events      chan event
	wake        waker
	flights     chan *flight // to the completer
	wg          sync.WaitGroup

	flushCtx context.Context // outlives a graceful stop up to STOP_TIMEOUT, not the session
	abort    context.CancelFunc

	nextStatus time.Time
	lastStatus time.Time       // when the last status update was sent
	sentAck    pglogrepl.LSN   // the flush position the last status update carried
	startEnd   pglogrepl.LSN   // the server's WAL end when the session began (idleKeepalive)
	lost       <-chan error    // the Feldera pipeline restarted or lost its state
	alertCtx   context.Context // canceled when lost has something: ends a receive
	front      *frontier       // the acknowledgement rule
	live       liveness        // the replication connection's heartbeat
	inc        *incremental    // the incremental snapshot under way, nil when none
	clock      stageClock      // times each source transaction to each stage
}

// replicationConfig parses the DSN and asks for a logical replication
// connection.
func replicationConfig(dsn string) (*pgconn.Config, error) {
	cfg, err := replconn.Config(dsn)
	if err != nil {
		return nil, fatal(fmt.Errorf("PG_DSN: %w", err))
	}
	return cfg, nil
}

func (c *Connector) session(ctx context.Context) error {
	c.maxStep.Store(0) // steps of an earlier session may belong to a state Feldera rolled back
	p, err := c.prepare(ctx, forRun)
	if err != nil {
		return err
	}
	c.incarnation = p.incarnation
	// A Feldera transaction left open (by a failed session, or a process
	// that crashed) is committed before anything else is sent: a snapshot
	// or a retraction waits for completions, which it would hold back.
	if err := c.settleTxn(ctx); err != nil {
		return err
	}
	rcfg, err := replicationConfig(c.cfg.DSN)
	if err != nil {
		return err
	}
	conn, err := pgconn.ConnectConfig(ctx, rcfg)
	if err != nil {
		return fromPostgres(fmt.Errorf("replication connection: %w", err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	defer c.closeChunkConn()
	for _, q := range pinnedGUCs {
		if _, err := conn.Exec(ctx, q).ReadAll(); err != nil {
			return fromPostgres(fmt.Errorf("replication connection: %s: %w", q, err))
		}
	}
	// Which server this is (after a failover, the promoted standby): its
	// identity decides whether the state can be continued (failover.go).
	if c.srv, err = c.identify(ctx, conn); err != nil {
		return err
	}
	if err := c.preflight(ctx, conn, c.srv); err != nil {
		return err
	}
	if err := c.startup(ctx, p, conn); err != nil {
		return err
	}
	if err := c.recordServer(c.srv); err != nil {
		return err
	}
	// Positions come from the server, never from an earlier session's
	// memory: after a failover or a slot recreated by a snapshot, the
	// slot may be behind what this process last acknowledged, and a
	// status update must not claim more than the slot holds.
	confirmed, err := slotConfirmed(ctx, conn, c.cfg.Slot)
	if err != nil {
		return err
	}
	if confirmed != c.acked {
		if c.acked != 0 {
			c.logger.Info("session: the slot's confirmed_flush_lsn differs from this process's last acknowledgement; starting from the slot's", "confirmed_flush_lsn", confirmed, "last_acked", c.acked)
		}
		c.acked = confirmed
		c.stats.Acked.Store(uint64(confirmed))
	}
	inc, err := c.newIncremental(ctx, p)
	if err != nil {
		return err
	}
	if inc != nil {
		// The connection newIncremental kept for the first worker, when
		// no worker took it (the session ended first). Deferred, so that
		// a session failing before its loop does not leak it.
		defer func() {
			if conn := inc.takeConn(); conn != nil {
				conn.Close(context.WithoutCancel(ctx))
			}
		}()
	}
	// messages: the incremental snapshot's watermarks and resnapshot
	// requests are logical messages (others are ignored).
	if c.silentEnd {
		c.silentEnd = false
		if err := c.endSilentWalsender(ctx, conn); err != nil {
			return err
		}
	}
	opts := pglogrepl.StartReplicationOptions{PluginArgs: []string{
		"proto_version '1'",
		"publication_names " + replconn.QuoteLiteral(quoteIdent(c.cfg.Publication)),
		"messages 'true'",
	}}
	if err := pglogrepl.StartReplication(ctx, conn, c.cfg.Slot, 0, opts); err != nil {
		return fromPostgres(fmt.Errorf("start replication on slot %s: %w", c.cfg.Slot, err))
	}
	dec := decode.NewDecoder(p.targets)
	dec.RequirePrimaryKey = c.cfg.RequirePrimaryKey
	dec.Options = c.decodeOptions(p.types)
	s := &stream{
		c: c, plan: p, conn: conn, dec: dec, targets: p.routes, groups: p.groups,
		interval:   replconn.StatusInterval(p.walTimeout),
		live:       liveness{timeout: c.replicationTimeout(p), heard: time.Now()},
		logger:     c.logger,
		filling:    newBatch(len(p.routes)),
		spare:      newBatch(len(p.routes)),
		maxFlight:  c.cfg.BatchMaxInFlight,
		flightSize: map[uint64][2]int{},
		front:      newFrontier(p.gate, c.acked),
		sentAck:    c.acked, // the slot's: a status repeating it moves nothing
		inc:        inc,
		startEnd:   c.srv.walEnd,
	}
	// Under exactly_once a completion is acknowledged once the watcher saw
	// the session's process after it (frontier.confirm).
	s.front.confirm = p.model == feldera.FTExactlyOnce
	if inc != nil {
		dec.WantKeys = make([]bool, len(p.routes))
	}
	// Each batch sends at most two events (posted, completed), at most
	// maxTxnFlight batches are in flight (inside a Feldera transaction;
	// BATCH_MAX_IN_FLIGHT outside one), and a retraction sends one: sends
	// never block.
	s.events = make(chan event, 2*maxTxnFlight+4)
	s.flights = make(chan *flight, maxTxnFlight+1)
	s.flushCtx, s.abort = context.WithCancel(c.stopContext(ctx))
	defer s.abort()
	k := &completer{c: c, in: s.flights, emit: s.emit}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		k.run(s.flushCtx)
	}()
	if inc != nil {
		s.startWorker() // when the state leaves a table to read
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var alert context.CancelFunc
	s.alertCtx, alert = context.WithCancel(ctx)
	defer alert()
	s.lost = c.watchPipeline(watchCtx, p, alert, s.wake.fire)
	c.stats.Sessions.Add(1)
	c.logger.Info("session: streaming", "publication", c.cfg.Publication, "tables", len(p.targets),
		"status_interval", s.interval, "ack_mode", c.cfg.AckMode, "batch_max_rows", c.cfg.BatchMaxRows, "batch_max_bytes", c.cfg.BatchMaxBytes, "batch_max_in_flight", c.cfg.BatchMaxInFlight, "linger", c.cfg.BatchLinger)
	c.health.streaming.Store(true)
	err = s.run(ctx)
	c.health.streaming.Store(false)
	c.health.flushSince.Store(0)
	s.abort()
	s.wg.Wait() // the poster, the completer and a retraction never outlive their session
	c.abandonTxn()
	return err
}

// ensureSlot creates the slot when missing. SNAPSHOT 'nothing' is always
// written: an exported snapshot nobody uses would pin xmin.
func (c *Connector) ensureSlot(ctx context.Context, conn *pgconn.PgConn) error {
	slot, err := replconn.ReadSlot(ctx, conn, c.cfg.Slot)
	if err != nil || slot.Exists {
		return err
	}
	if _, err := snapshot.CreateSlot(ctx, conn, c.cfg.Slot, false, c.srv.failover); err != nil {
		return err
	}
	c.logger.Info("session: created replication slot (stream only, no snapshot)")
	return nil
}

// slotConfirmed reads the slot's confirmed_flush_lsn (0 when it has none).
func slotConfirmed(ctx context.Context, conn *pgconn.PgConn, name string) (pglogrepl.LSN, error) {
	slot, err := replconn.ReadSlot(ctx, conn, name)
	if err != nil {
		return 0, err
	}
	if !slot.Exists {
		return 0, fmt.Errorf("slot %s does not exist after startup", name)
	}
	return slot.Confirmed, nil
}

// pending reports whether anything read is not yet acknowledged.
func (s *stream) pending() bool {
	return s.open || s.filling.total > 0 || s.busy() || s.filling.ackTo > s.c.acked || s.front.pending()
}

// busy reports whether a POST, a batch in flight or a retraction runs.
func (s *stream) busy() bool {
	return s.posting || s.retracting || s.front.inFlight() > 0
}

// Feldera buffers at most this many records (and bytes) per HTTP ingress
// endpoint; past it, a POST stops being read until a step drains the
// buffer (DURABILITY.md §4), and one blocked 30 s (a long checkpoint, a
// stalled step) is answered 503 by the manager: fenced and replayed. So
// batches in flight never add up to more than that (a single larger batch
// still goes, alone), and POSTs never meet Feldera's backpressure.
const (
	felderaQueueRecords = 100_000
	felderaQueueBytes   = 100_000_000
)

// canPost reports whether the filling batch may be sent now: no POST
// runs (one at a time keeps source order), no retraction, fewer than
// BATCH_MAX_IN_FLIGHT batches are in flight, and with it they stay within
// Feldera's ingress buffer.
func (s *stream) canPost() bool {
	if s.posting || s.retracting {
		return false
	}
	if s.txnOpen {
		// The batches of an open Feldera transaction complete only at
		// its commit, which the batch that ends the source transaction
		// asks for: they go on past BATCH_MAX_IN_FLIGHT (they hold only
		// tokens) and past the buffer bound (the transaction's steps
		// drain Feldera's buffer as usual), up to maxTxnFlight.
		return s.front.inFlight() < maxTxnFlight
	}
	if s.front.inFlight() >= s.maxFlight {
		return false
	}
	return s.front.inFlight() == 0 ||
		s.flightRows+s.filling.total <= felderaQueueRecords && s.flightBytes+s.filling.size() <= felderaQueueBytes
}

// landed forgets the size of a batch that completed.
func (s *stream) landed(id uint64) {
	if sz, ok := s.flightSize[id]; ok {
		s.flightRows -= sz[0]
		s.flightBytes -= sz[1]
		delete(s.flightSize, id)
	}
}

// reach moves the position to lsn once everything Feldera completed so far
// is durable under the gate: lsn needs nothing more from Feldera (its rows
// went out in earlier batches, or it had none), but a retraction or an
// earlier batch may still wait for a checkpoint.
func (s *stream) reach(lsn pglogrepl.LSN) {
	s.advance(s.front.reach(lsn, s.c.maxStep.Load(), time.Now()))
	s.publishWait()
}

// checkpointed applies the newest checkpoint the watcher saw; it reports
// whether the position moved. A checkpoint that covers more than the last
// one is first recorded in the state file (recordCheckpoint): a restart
// must restore it, or a later one, before anything it covers was
// acknowledged.
func (s *stream) checkpointed() (bool, error) {
	if !s.front.pending() {
		return false, nil
	}
	before := s.c.acked
	if s.front.confirm {
		s.advance(s.front.confirmedAt(time.Unix(0, s.c.seenAt.Load())))
	}
	steps := s.c.checkpointed.Load()
	if steps > s.front.covered {
		if err := s.recordCheckpoint(); err != nil {
			return false, err
		}
	}
	s.advance(s.front.checkpointed(steps))
	s.publishWait()
	return s.c.acked > before, nil
}

// recordCheckpoint writes the session's newest fresh checkpoint into the
// state file. The first one after a program change under exactly_once
// also closes the journal gap: Feldera journals its input again, and
// everything completed is durable (up to the checkpoint by it, after it
// by the journal), so the gate goes back to completion.
func (s *stream) recordCheckpoint() error {
	cps := s.c.lastCheckpoints.Load()
	if s.inc == nil || cps == nil {
		return nil
	}
	cp := ref(*cps)
	if s.inc.st.Checkpoint != nil && s.inc.st.Checkpoint.UUID == cp.UUID {
		return nil
	}
	st := s.inc.st
	st.Checkpoint = cp
	gap := st.JournalGap != ""
	st.JournalGap = ""
	if err := s.writeChunks(); err != nil {
		return err
	}
	if gap && s.plan.model == feldera.FTExactlyOnce && s.c.forceGate == nil {
		s.front.gate = GateComplete
		s.c.gate.Store(int32(GateComplete))
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
	at, ok := s.front.waiting()
	if !ok || time.Since(at) <= s.c.cfg.NoProgressTimeout {
		return nil
	}
	why := "no Feldera checkpoint came"
	if e := s.c.health.checkpointError.Load(); e != nil && s.c.health.checkpointFailed.Load() {
		why = "Feldera's checkpoints fail: " + *e
	}
	return &FatalError{Err: fmt.Errorf("%w for %s (NO_PROGRESS_TIMEOUT): completed work waited that long for a checkpoint to cover it (%s), so nothing could be acknowledged and the slot retained WAL", ErrNoProgress, time.Since(at).Round(time.Second), why)}
}

// publishWait tells the watcher since when completed work waits for a
// checkpoint (it may ask for one) and the status how long.
func (s *stream) publishWait() {
	// The WAL figure first: a look that sees work waiting reads the
	// figure of that work, not of the work before.
	s.c.checkpointWAL.Store(int64(s.front.waitingWAL()))
	if at, ok := s.front.waiting(); ok {
		s.c.checkpointWaits.Store(at.UnixNano())
	} else {
		s.c.checkpointWaits.Store(0)
	}
}

func (s *stream) run(ctx context.Context) error {
	var ev decode.Event
	var rc recvCtx
	defer rc.release()
	s.nextStatus = time.Now()
	for {
		if ctx.Err() != nil {
			return s.shutdown()
		}
		base := s.wake.arm(s.alertCtx) // armed before the drain: an event sent after it wakes the receive
		if err := s.collect(); err != nil {
			return err
		}
		if s.inc != nil {
			if err := s.saveChunks(false); err != nil {
				return err
			}
		}
		select {
		case err := <-s.lost:
			return fromFeldera(err)
		default:
		}
		if err := s.stalledGate(); err != nil {
			return err
		}
		if moved, err := s.checkpointed(); err != nil {
			return err
		} else if moved {
			if err := s.status(); err != nil {
				return err
			}
		}
		now := time.Now()
		if s.canPost() && s.flushDue(now) {
			s.startFlush(false)
		}
		if !now.Before(s.nextStatus) {
			if err := s.status(); err != nil {
				return err
			}
		}
		// A chunk whose high watermark is late: nudge the walsender (see
		// watermarkNudge), and look again no later than the next nudge.
		var nudge time.Time
		waiting := false
		if s.inc != nil {
			handed := s.inc.awaited()
			if nudge, waiting = nudgeAt(handed, s.lastStatus); waiting && !now.Before(nudge) {
				s.logger.Debug("snapshot: incremental: a chunk's high watermark has not come: status update sent to wake the walsender", "waited", now.Sub(handed).Round(time.Millisecond))
				if err := s.status(); err != nil {
					return err
				}
				nudge, _ = nudgeAt(handed, s.lastStatus)
			}
		}
		// The filling batch is full and cannot be sent yet (a POST runs,
		// or BATCH_MAX_IN_FLIGHT batches are in flight): stop reading
		// (the memory bound) but keep reporting.
		if s.c.full(s.filling) && !s.canPost() {
			if err := s.waitEvent(); err != nil {
				return err
			}
			continue
		}
		deadline := s.nextStatus
		if s.front.pending() && now.Add(checkpointPoll).Before(deadline) {
			deadline = now.Add(checkpointPoll) // look at the watcher's checkpoint
		}
		if ld, ok := s.lingerDeadline(); ok && ld.Before(deadline) {
			deadline = ld
		}
		if waiting && nudge.Before(deadline) {
			deadline = nudge
		}
		look, err := s.heartbeat(now)
		if err != nil {
			return err
		}
		if !look.IsZero() && look.Before(deadline) {
			deadline = look
		}
		msg, err := s.conn.ReceiveMessage(rc.get(base, deadline))
		if err != nil {
			if ctx.Err() != nil {
				continue // shutdown at the top of the loop
			}
			if pgconn.Timeout(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				rc.release()
				continue
			}
			return fromPostgres(fmt.Errorf("receive: %w", err))
		}
		s.live.heardAt(time.Now())
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if err := s.handle(m.Data, &ev); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return ErrStreamEnded
		default:
			// NoticeResponse and friends: nothing to do.
		}
	}
}

// recvCtx reuses one deadline context across receives while the deadline
// and the base context stay the same, instead of one per message.
type recvCtx struct {
	ctx      context.Context
	cancel   context.CancelFunc
	base     context.Context
	deadline time.Time
}

func (r *recvCtx) get(base context.Context, deadline time.Time) context.Context {
	if r.ctx == nil || r.ctx.Err() != nil || r.base != base || !deadline.Equal(r.deadline) {
		r.release()
		r.ctx, r.cancel = context.WithDeadline(base, deadline)
		r.base, r.deadline = base, deadline
	}
	return r.ctx
}

func (r *recvCtx) release() {
	if r.cancel != nil {
		r.cancel()
	}
	r.ctx, r.cancel = nil, nil
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
		moved := false
		if !s.pending() {
			// Nothing open, nothing buffered, nothing in flight: every byte
			// below ServerWALEnd was read, so idle slots release WAL (writes
			// to unpublished tables move the WAL head too).
			moved = pkm.ServerWALEnd > s.c.acked
			s.reach(pkm.ServerWALEnd)
			if idleKeepalive(pkm.ServerWALEnd, s.startEnd) {
				s.c.healthy = time.Now()
			}
		}
		if pkm.ReplyRequested || moved {
			return s.status()
		}
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
		if len(xld.WALData) > 0 && xld.WALData[0] != 'C' && s.c.full(s.filling) && s.canPost() {
			// A full batch is sealed when the next change arrives, not at
			// the change that filled it: when that change was its
			// transaction's last, the COMMIT still goes in, and the batch
			// holds whole transactions (no Feldera transaction needed).
			s.startFlush(false)
		}
		if err := s.dec.Decode(xld.WALData, s.filling, ev); err != nil {
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
	} else if ev.Kind == decode.KindMessage && ev.Message.Prefix == watermarkPrefix {
		s.logger.Warn("resnapshot: ignoring a request: there is no state file yet (SNAPSHOT_MODE=never, first run), so nothing could record it", "lsn", ev.Message.LSN)
	}
	switch ev.Kind {
	case decode.KindBegin:
		s.open, s.openRows, s.openRecs, s.openCommit = true, false, 0, ev.Begin.FinalLSN
	case decode.KindCommit:
		s.open = false
		if s.openRows {
			s.clock.commit(ev.Commit.EndLSN, ev.Commit.CommitTime)
		}
		if s.openRecs > 1 && s.openRows {
			s.filling.multi = true // its records are in this batch: whole, or the rest of it
		}
		// A COMMIT records how far a flush may move the position; only a
		// completed flush moves it.
		if s.filling.total == 0 {
			// Nothing of it is buffered (its rows went out in batches
			// already sent, a TRUNCATE retracted them, or it had no
			// mapped rows): it needs only what was sent before it.
			if ev.Commit.EndLSN > s.c.acked {
				before := s.c.acked
				s.reach(ev.Commit.EndLSN)
				if s.c.acked > before {
					if err := s.status(); err != nil {
						return err
					}
				}
			}
		} else if ev.Commit.EndLSN > s.filling.ackTo {
			s.filling.ackTo = ev.Commit.EndLSN
		}
		if (s.c.cfg.BatchLinger == 0 && s.filling.total > 0 || s.txnOpen) && s.canPost() {
			s.startFlush(false) // an open Feldera transaction ends at the source COMMIT
		}
	case decode.KindRows:
		s.openRows = s.openRows || s.open
		if s.open {
			s.openRecs += ev.Rows
		}
		s.filling.added(ev.Route, ev.Rows, time.Now())
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
	// Leaf partitions sharing a Feldera table: a TRUNCATE of all of them
	// (of their root) empties the table; a TRUNCATE of only some cannot be
	// retracted, because Feldera cannot tell which of its rows came from
	// which leaf. That is refused rather than guessed.
	// A TRUNCATE message lists each relation once.
	perRoute := map[int]int{}
	var once []*decode.Rel // the first truncated source of each route
	for _, r := range rels {
		if perRoute[r.Target.Route]++; perRoute[r.Target.Route] == 1 {
			once = append(once, r)
		}
	}
	for _, r := range rels {
		if n := len(s.groups[r.Target.Route]); perRoute[r.Target.Route] < n {
			return fatal(fmt.Errorf("TRUNCATE of %s, one of %d partitions that share Feldera table %s: pgfeldera cannot retract only that partition's rows: resnapshot the table (pgfeldera resnapshot with its partitions), and TRUNCATE the partitioned table rather than one partition",
				r.Target.Qualified(), n, r.Target.Dest.Name))
		}
	}
	for i, r := range rels {
		names[i] = r.Target.Qualified()
	}
	rels = once
	for _, r := range rels {
		route := r.Target.Route
		s.filling.total -= s.filling.rows[route]
		s.filling.rows[route] = 0
		s.filling.bufs[route] = s.filling.bufs[route][:0]
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
	s.retracting = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		var err error
		for _, r := range rels {
			if err = s.c.retractAll(s.flushCtx, s.targets, r); err != nil {
				err = fmt.Errorf("truncate of %s: %w", r.Target.Qualified(), err)
				break
			}
		}
		s.emit(event{kind: evRetracted, err: err})
	}()
	if err := s.drain(); err != nil {
		return err
	}
	if s.filling.total == 0 && s.filling.ackTo > 0 {
		// Every buffered row was of the truncated tables: the COMMITs
		// they carried need nothing more.
		s.reach(s.filling.ackTo)
		s.filling.ackTo = 0
	}
	return nil
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
func (s *stream) noteSent(openRows bool) {
	if high := sentBound(s.received, s.openCommit, openRows); high > s.c.sentHigh {
		s.c.sentHigh = high
	}
}

// sentBound is noteSent's rule: the position a batch's commits end by.
func sentBound(received, openCommit pglogrepl.LSN, openRows bool) pglogrepl.LSN {
	if openRows && openCommit+1 > received {
		return openCommit + 1
	}
	return received
}

// advance moves the acknowledged position (never backwards).
func (s *stream) advance(lsn pglogrepl.LSN) {
	s.stage(StageComplete, s.front.completed())
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
		s.clock.reach(st, lsn, time.Now(), s.c.observer.Stage)
	}
}

// statusAsking sends a status update; reply asks the server to answer at
// once (a keepalive), which the heartbeat uses. It is the one place a
// status update is sent, so the one place the acknowledged position
// reaches Postgres: an update that carries a position past the last one
// sent passes after_ack, whichever rule moved the position (a completion,
// a checkpoint, a COMMIT with nothing buffered, an idle keepalive).
func (s *stream) statusAsking(reply bool) error {
	if err := replconn.SendStatus(s.conn, s.received, s.c.acked, s.c.acked, reply); err != nil {
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
	ask, dead, at := s.live.next(now)
	switch {
	case dead:
		return at, &SilentError{For: now.Sub(s.live.heard)}
	case ask:
		s.logger.Debug("session: the replication connection has been quiet for half its timeout: asking the server for a reply", "quiet", now.Sub(s.live.heard).Round(time.Millisecond))
		return at, s.statusAsking(true)
	}
	return at, nil
}

// idleKeepalive reports whether a keepalive that found nothing pending
// (nothing open, buffered or in flight) shows the session idle, which
// restarts the NO_PROGRESS_TIMEOUT clock: only once the server has sent
// everything it had when the session began (walEnd, the keepalive's
// position, at or past startEnd). PostgreSQL 18.4 sends a keepalive at
// the slot's confirmed position as streaming starts, before the WAL after
// it; taken as idle, it restarted the clock at every reconnect, and a
// Feldera that never completed kept the process reconnecting forever
// instead of exiting 1 (TestBinary_NoProgressTimeoutExits1 on 18.4).
func idleKeepalive(walEnd, startEnd pglogrepl.LSN) bool {
	return walEnd >= startEnd
}

// lingerDeadline is when the filling batch is due by its linger, when
// that deadline applies: once it passes, flushDue holds, so a receive
// bounded by it never ends before it reads without a flush following. A
// full batch, or one a table's last chunk marked (sealNow), waits inside
// a source transaction for the change that seals it or its COMMIT
// instead, and so does one that holds rows of the open transaction (see
// flushDue). (A sealNow batch once took the deadline too: inside a
// transaction, with the deadline past, every receive ended before it
// read, the COMMIT never came, and the snapshot never completed.)
func (s *stream) lingerDeadline() (time.Time, bool) {
	b := s.filling
	if b.total == 0 || s.c.full(b) || b.sealNow || s.open && s.openRows || !s.canPost() || s.c.cfg.BatchLinger <= 0 {
		return time.Time{}, false
	}
	return b.first.Add(s.c.cfg.BatchLinger), true
}

// flushDue reports whether the filling batch should be sent now. The
// linger never seals a batch that holds rows of the open source
// transaction: nothing of it may be acknowledged, nor (inside the Feldera
// transaction that sealing it would need) shown, before its COMMIT, so
// sealing it early only adds a Feldera transaction per source one. The
// batch waits for the COMMIT, or for its bound.
func (s *stream) flushDue(now time.Time) bool {
	b := s.filling
	switch {
	case b.total == 0:
		// A Feldera transaction left open by a batch that ended inside a
		// source transaction, which has ended since: commit it now.
		return s.txnOpen && !s.open
	case s.c.full(b):
		// Inside a transaction the next change seals it (see handle).
		return !s.open
	case s.c.cfg.BatchLinger == 0 || b.sealNow:
		return !s.open
	case s.open && s.openRows:
		return false
	}
	return !now.Before(b.first.Add(s.c.cfg.BatchLinger))
}

// startFlush hands the filling batch to the poster: its POSTs run in a
// goroutine while the stream reads on; once they are answered its buffers
// come back as the spare and its tokens go to the completer. end commits
// a Feldera transaction the batch continues even inside a source
// transaction (a TRUNCATE, a stop: they need everything sent complete).
func (s *stream) startFlush(end bool) {
	b := s.filling
	// A batch sealed inside a source transaction splits it only when it
	// holds some of its rows: one sealed (by the linger) after a BEGIN
	// whose rows have not come yet holds whole transactions, and needs no
	// Feldera transaction (an incremental snapshot's watermark
	// transactions, which carry no rows, hit that at every chunk).
	spans := s.open && s.openRows && !end
	s.noteSent(s.open && s.openRows)
	s.openRows = false
	if spans && s.txnOpen && s.front.inFlight() >= maxTxnFlight-1 {
		// The source transaction outgrew what one Feldera transaction may
		// keep in flight: commit what was sent, and go on in a new one.
		spans = false
		if !s.warnedTxnCut {
			s.warnedTxnCut = true
			s.logger.Warn("flush: a source transaction is larger than one Feldera transaction may hold in flight; committing it in Feldera in parts (views see the parts)",
				"batches", maxTxnFlight, "batch_max_rows", s.c.cfg.BatchMaxRows)
		}
	}
	plan := planTxn(s.c.cfg.Transactions, s.txnOpen, spans, b.multi, b.tables())
	s.txnOpen = plan.in && !plan.end
	crashtest.Point("after_decode")
	s.seq++
	s.filling = s.spare
	s.filling.reset(s.seq)
	s.spare = nil
	now := time.Now()
	id := s.front.enter(b.ackTo, now)
	sz := [2]int{b.total, b.size()}
	s.flightSize[id] = sz
	s.flightRows += sz[0]
	s.flightBytes += sz[1]
	s.posting = true
	s.setFlushSince()
	accepted := s.c.cfg.AckMode == AckAccepted
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tokens, start, mark, err := s.c.send(s.flushCtx, s.targets, b, plan)
		if err == nil {
			crashtest.Point("after_post")
			if !accepted {
				s.flights <- &flight{id: id, seq: b.seq, rows: b.total, tokens: tokens, start: start, sent: time.Now(), txn: mark}
			} else {
				s.c.stats.Batches.Add(1)
				s.c.observer.Batch(b.total, time.Since(start), 0)
			}
		}
		s.emit(event{kind: evPosted, b: b, id: id, ackNow: accepted, err: err})
	}()
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
	defer func() { s.live.heardAt(time.Now()) }()
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
	for s.posting {
		if err := s.waitEvent(); err != nil {
			return err
		}
	}
	if s.txnOpen {
		s.startFlush(true)
	}
	return nil
}

// drain waits until nothing is in flight: every batch sent completed and
// any retraction ended.
func (s *stream) drain() error {
	for s.busy() {
		if err := s.waitEvent(); err != nil {
			return err
		}
	}
	return nil
}

// apply is the loop's side of an event. Only a completion moves the
// position, through the frontier; any failure ends the session, which
// drops everything in flight: the next one replays it from the slot.
func (s *stream) apply(ev event) error {
	if ev.err != nil {
		if ev.kind != evChunk {
			s.c.health.flushFailed.Store(true)
		}
		if ev.kind == evPosted || ev.kind == evComplete {
			return fromFeldera(ev.err) // a POST or a completion: Feldera's side
		}
		return ev.err
	}
	before := s.c.acked
	switch ev.kind {
	case evPosted:
		s.posting = false
		s.stage(StageSent, ev.b.ackTo)
		ev.b.shrink(64 << 20)
		s.spare = ev.b
		if ev.ackNow {
			s.landed(ev.id)
			s.advance(s.front.done(ev.id, 0, time.Now()))
		}
	case evComplete:
		s.landed(ev.id)
		s.advance(s.front.done(ev.id, ev.step, time.Now()))
		s.c.health.flushFailed.Store(false)
	case evRetracted:
		s.retracting = false
		s.c.health.flushFailed.Store(false)
	}
	s.publishWait()
	s.setFlushSince()
	if s.c.acked > before {
		return s.status()
	}
	return nil
}

// setFlushSince tells the readiness check since when the oldest work in
// flight waits.
func (s *stream) setFlushSince() {
	if at, ok := s.front.oldestOpen(); ok {
		s.c.health.flushSince.Store(at.UnixNano())
	} else {
		s.c.health.flushSince.Store(0)
	}
}

// flush POSTs each route's lines of b, then (wait) blocks until every
// token is complete: the snapshot and the retractions, which send one
// batch at a time. Any failure leaves the position where it was.
//
// A batch may hold part of a transaction when the transaction is larger
// than BATCH_MAX_ROWS: Feldera then sees the first part before the rest.
// That weakens the source transaction's atomicity in Feldera; it is the
// price of a hard memory bound, and the primary key reconciles a replay of
// the seam. The position only ever moves to a COMMIT all of whose rows are
// complete.
func (c *Connector) flush(ctx context.Context, targets []*decode.Target, b *batch, wait bool) error {
	c.health.flushSince.Store(time.Now().UnixNano())
	defer c.health.flushSince.Store(0)
	failed := true
	defer func() { c.health.flushFailed.Store(failed) }()
	tokens, start, err := c.post(ctx, targets, b)
	if err != nil {
		return err
	}
	posted := time.Now()
	if wait {
		wctx, cancel := context.WithTimeout(ctx, c.cfg.CompletionTimeout)
		defer cancel()
		slow := time.AfterFunc(completionLogAfter, func() {
			c.logger.Warn("flush: waiting for Feldera to complete a batch; WAL is retained on the primary meanwhile", "batch", b.seq, "rows", b.total)
		})
		defer slow.Stop()
		for _, s := range tokens {
			step, err := c.sink.WaitCompleteStep(wctx, s.token)
			if err != nil {
				if code := feldera.ErrorCode(err); code != "" {
					c.observer.FelderaError(code)
				}
				if wctx.Err() != nil && ctx.Err() == nil {
					return fmt.Errorf("%w: batch %d on %s not complete after %s (FELDERA_COMPLETION_TIMEOUT): nothing acknowledged", ErrFelderaUnavailable, b.seq, s.table, time.Since(start).Round(time.Millisecond))
				}
				if feldera.IsRestarted(err) {
					return fmt.Errorf("feldera pipeline restarted before batch %d on %s completed: nothing acknowledged; replaying from the slot: %w", b.seq, s.table, err)
				}
				return fmt.Errorf("wait for completion of %s: %w", s.table, err)
			}
			if step == 0 && c.Gate() == GateCheckpoint {
				return fatal(fmt.Errorf("feldera reported batch %d on %s complete without its step (GET /completion_status has no \"step\"), which at_least_once needs to know when a checkpoint covers it: upgrade Feldera", b.seq, s.table))
			}
			raise(&c.maxStep, step)
		}
	}
	c.stats.Batches.Add(1)
	c.observer.Batch(b.total, posted.Sub(start), time.Since(posted))
	failed = false
	return nil
}

// raise sets v to x when x is larger.
func raise(v *atomic.Uint64, x uint64) {
	for cur := v.Load(); x > cur && !v.CompareAndSwap(cur, x); cur = v.Load() {
	}
}

// waitFence blocks while an unanswered ingress request may still be queued
// by Feldera.
func (c *Connector) waitFence(ctx context.Context) error {
	wait := time.Until(time.Unix(0, c.fenceUntil.Load()))
	if wait <= 0 {
		return nil
	}
	c.logger.Warn("flush: an ingress request got no clear answer and may still be applied; waiting before sending anything newer", "wait", wait.Round(time.Millisecond))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stopping:
		// A graceful stop does not wait out the fence: nothing is sent or
		// acknowledged, the slot replays it, and the fence file carries
		// the deadline to the next process.
		return errors.New("stopping while the ingress fence holds: nothing sent")
	case <-t.C:
		return nil
	}
}

// shutdown is the graceful stop: flush what was read, wait for completion,
// send the final status, and confirm on a second connection that the slot
// moved.
func (s *stream) shutdown() error {
	s.logger.Info("session: stopping: flushing the outbox")
	if err := s.closeTxn(); err != nil {
		return err
	}
	if err := s.drain(); err != nil {
		return err
	}
	if s.filling.total > 0 {
		s.startFlush(true)
		if err := s.drain(); err != nil {
			return err
		}
	} else if s.filling.ackTo > 0 {
		s.reach(s.filling.ackTo)
	}
	if s.front.pending() {
		// at_least_once: what completed is durable once a checkpoint
		// covers it. Ask for one and wait (up to STOP_TIMEOUT); what is
		// still uncovered then is replayed by the next start.
		if err := s.c.awaitCheckpoint(s.c.stopContext(context.Background()), s.plan, s.front.highestPending()); err != nil {
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

// confirm waits up to 5 s for confirmed_flush_lsn to reach lsn: the
// protocol does not acknowledge a status update.
func (c *Connector) confirm(lsn pglogrepl.LSN) error {
	ctx, cancel := context.WithTimeout(c.stopContext(context.Background()), 5*time.Second)
	defer cancel()
	conn, err := replconn.Connect(ctx, c.cfg.DSN)
	if err == nil {
		defer conn.Close(context.Background())
		for {
			var confirmed pglogrepl.LSN
			var ok bool
			confirmed, ok, err = replconn.Confirmed(ctx, conn, c.cfg.Slot)
			if ok && confirmed >= lsn {
				c.logger.Info("session: stopped; final acknowledgement confirmed by the slot", "confirmed_flush_lsn", confirmed)
				return nil
			}
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(50 * time.Millisecond):
				continue
			}
			break
		}
	}
	c.logger.Warn("session: stopped, but the final acknowledgement was not confirmed: a restart will redeliver from the slot (harmless with primary keys)", "want", lsn, "err", err)
	return nil
}

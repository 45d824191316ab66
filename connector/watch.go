package connector

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/setup"
)

// Watching the pipeline while a session streams: restarts, redeploys and,
// under the checkpoint gate, checkpoints.

// checkpointPoll is how often the watcher reads /checkpoints while
// completed work waits for one, and /stats for a restart.
const checkpointPoll = 500 * time.Millisecond

// watchPipeline polls the pipeline while the session streams, so that a
// Feldera restart is noticed even when no token is outstanding:
//
//   - a new incarnation_uuid under the same deployment_id is a restart in
//     place: the session ends, and the next one checks what the restart
//     restored (restoredEnough) before it replays from the slot; without
//     fault tolerance the state is gone, and the next startup resnapshots.
//   - a new deployment_id without fault tolerance: the same resnapshot.
//     With fault tolerance the pipeline resumed from its checkpoint: the
//     session ends and the next one checks it.
//
// Under the checkpoint gate it publishes the newest checkpoint that covers
// what this session completed (freshCheckpoint), asks for one when
// completed work has waited CheckpointAfter, and reports a requested
// checkpoint that failed.
//
// Its goroutine is counted in wg and ends when ctx is canceled; the
// session joins it before it ends, since it writes into p.
func (c *Connector) watchPipeline(ctx context.Context, wg *sync.WaitGroup, p *setup.Plan, alert, looked func()) <-chan error {
	lost := make(chan error, 1)
	c.checkpointed.Store(0)
	c.seenAt.Store(0)
	c.checkpointWaits.Store(0)
	c.checkpointWAL.Store(0)
	// Under exactly_once a completion is acknowledged once a look begun
	// after it found the session's process (frontier.confirm): the looks
	// come as often as checkpoint polls, and each wakes the receive loop,
	// so acknowledgements trail completions by half a second, not two.
	confirming := p.Model == feldera.FTExactlyOnce
	wg.Add(1)
	go func() {
		defer wg.Done()
		every := 2 * time.Second
		if p.Gate == GateCheckpoint || confirming {
			every = checkpointPoll
		}
		t := time.NewTicker(every)
		defer t.Stop()
		pw := &partitionWatch{c: c, p: p}
		defer pw.close()
		var ask asker
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if p.Gate == GateCheckpoint {
				c.lookAtCheckpoints(ctx, p, &ask)
			}
			err := c.checkRestart(ctx, p)
			if err == nil && confirming {
				looked()
			}
			if err == nil && n%partitionCheckEvery == partitionCheckEvery-1 {
				err = pw.check(ctx)
			}
			if err != nil {
				lost <- err
				alert() // wake the receive loop: a restart is noticed at once, not at the next status
				return
			}
		}
	}()
	return lost
}

// lookAtCheckpoints is one look of the watcher under the checkpoint gate:
// it publishes the newest checkpoint that covers what this session
// completed, asks for one when ask says it is due, and reports a
// requested checkpoint that failed.
func (c *Connector) lookAtCheckpoints(ctx context.Context, p *setup.Plan, ask *asker) {
	cp, ok, same := c.freshCheckpoint(ctx, p)
	now := time.Now()
	if ok {
		c.checkpointed.Store(cp.Steps)
		c.health.checkpointFailed.Store(false)
		ask.seen(cp.UUID, now)
	}
	// A checkpoint is asked for only of the process the session feeds
	// (freshCheckpoint read /stats after the list): one of a restarted
	// process would hold what was sent to it before the restart was seen,
	// and make it look like a later history than the one restored.
	var waiting time.Time
	if at := c.checkpointWaits.Load(); at != 0 && same {
		waiting = time.Unix(0, at)
	}
	wal := c.checkpointWAL.Load()
	if why := ask.due(now, waiting, wal, p.WALBudget, c.cfg.CheckpointAfter); why != "" {
		s, err := c.sink.RequestCheckpoint(ctx)
		ask.asking(now, s, err)
		if err != nil {
			c.logger.Warn("feldera: checkpoint request failed; waiting for the pipeline's own", "err", err)
		} else {
			c.logger.Info("feldera: asked for a checkpoint: "+why, "waited", now.Sub(waiting).Round(time.Millisecond),
				"wal_waiting", wal, "checkpoint_after", c.cfg.CheckpointAfter, "checkpoint_wal", p.WALBudget)
		}
	}
	if ask.seq != 0 {
		c.checkFailure(ctx, ask.seq)
	}
}

// asker decides when to ask Feldera for a checkpoint: once completed work
// has waited CheckpointAfter for one, or holds the WAL budget. By time,
// not again before CheckpointAfter; by WAL, not again before the last
// request was served (a checkpoint newer than the one at the request,
// seen for two looks, so the session has applied it and the WAL figure
// is fresh) or CheckpointAfter passed (a request lost or failed): a
// checkpoint that takes longer than a look is not asked for again and
// again while it runs.
type asker struct {
	asked  time.Time // the last request, zero: none yet
	failed bool      // it failed
	seq    uint64    // its sequence number, for checkFailure
	at     string    // the newest checkpoint when it was asked
	newest string    // the newest checkpoint seen
	newAt  time.Time // when newest was first seen
}

// seen records the newest checkpoint a look found.
func (a *asker) seen(uuid string, now time.Time) {
	if uuid != a.newest {
		a.newest, a.newAt = uuid, now
	}
}

// asking records a request made now.
func (a *asker) asking(now time.Time, seq uint64, err error) {
	a.asked, a.at, a.failed = now, a.newest, err != nil
	if err == nil {
		a.seq = seq
	}
}

// due says why to ask now, or "". waiting is since when completed work
// waits for a checkpoint (zero: none, or not in the session's process);
// wal is how much WAL it holds, budget the WAL that triggers a request
// (0: none).
func (a *asker) due(now, waiting time.Time, wal, budget int64, after time.Duration) string {
	if waiting.IsZero() {
		return ""
	}
	sinceAsked := now.Sub(a.asked)
	if a.asked.IsZero() {
		sinceAsked = after
	}
	if now.Sub(waiting) >= after && sinceAsked >= after {
		return "completed work waited for one"
	}
	if budget <= 0 || wal < budget {
		return ""
	}
	served := !a.failed && a.newest != a.at && now.Sub(a.newAt) >= 2*checkpointPoll
	if a.asked.IsZero() || served || sinceAsked >= after {
		return "completed work waiting for one holds FELDERA_CHECKPOINT_WAL of WAL"
	}
	return ""
}

// freshCheckpoint is the newest checkpoint that can cover what this
// session completed: one taken in the pipeline process the session feeds
// (its incarnation) after the session began. A restore resumes Feldera's
// step counter from the restored checkpoint, so step numbers repeat
// across processes: a checkpoint of another process, or one listed before
// the session, may carry a step number as high as a batch's and hold
// nothing of it. The list is read first and /stats second: the
// incarnation never comes back, so if it is still the session's, every
// checkpoint listed new was taken by it. When /stats cannot be read, no
// checkpoint counts (ok false): coverage waits, it is never assumed. same
// reports that /stats answered with the session's incarnation.
func (c *Connector) freshCheckpoint(ctx context.Context, p *setup.Plan) (cp feldera.Checkpoint, ok, same bool) {
	cps, err := c.sink.Checkpoints(ctx)
	if err != nil {
		return cp, false, false
	}
	if c.test.trustCheckpoints && len(cps) > 0 {
		c.lastCheckpoints.Store(&cps)
		return cps[len(cps)-1], true, true
	}
	st, err := c.sink.Stats(ctx)
	if err != nil || p.Incarnation == "" || st.GlobalMetrics.IncarnationUUID != p.Incarnation {
		return cp, false, false
	}
	if len(cps) == 0 || p.CkptBefore[cps[len(cps)-1].UUID] {
		return cp, false, true
	}
	c.lastCheckpoints.Store(&cps)
	return cps[len(cps)-1], true, true
}

// checkFailure reports, once, a checkpoint asked for (sequence number seq
// or later) that failed: Feldera answers POST /checkpoint at once and
// writes the checkpoint in the background, so a failure shows only in
// /checkpoint_status. While checkpoints fail, nothing completed is
// acknowledged under at_least_once: /readyz turns 503, the failure is
// counted, and NO_PROGRESS_TIMEOUT ends the process if it lasts.
func (c *Connector) checkFailure(ctx context.Context, seq uint64) {
	cs, err := c.sink.CheckpointStatus(ctx)
	if err != nil || cs.Failure == nil || cs.Failure.SequenceNumber < seq || cs.Failure.SequenceNumber <= c.failedSeq.Load() {
		return
	}
	c.failedSeq.Store(cs.Failure.SequenceNumber)
	c.health.checkpointFailed.Store(true)
	c.health.checkpointError.Store(&cs.Failure.Error)
	c.stats.CheckpointFailures.Add(1)
	c.logger.Error("feldera: a checkpoint failed: nothing completed since the last checkpoint can be acknowledged (at_least_once), and the slot retains WAL meanwhile",
		"checkpoint_sequence_number", cs.Failure.SequenceNumber, "error", cs.Failure.Error)
}

// checkRestart compares the pipeline's deployment and incarnation with
// the ones the session started with (see watchPipeline).
func (c *Connector) checkRestart(ctx context.Context, p *setup.Plan) error {
	began := time.Now()
	// /stats before the pipeline: a redeploy replaces the deployment id
	// before its new process (a new incarnation) answers, so a look that
	// sees the new incarnation also sees the new deployment, and names a
	// redeploy as one, not as a restart in place.
	st, statsErr := c.sink.Stats(ctx)
	if p.DeploymentID != "" {
		pipe, err := c.sink.Pipeline(ctx)
		if err == nil && pipe.DeploymentID != nil && *pipe.DeploymentID != p.DeploymentID {
			model, err := pipe.FaultToleranceModel()
			switch {
			case err != nil:
				return fatal.Wrap(fmt.Errorf("feldera pipeline was redeployed (deployment %s → %s): %w", p.DeploymentID, *pipe.DeploymentID, err))
			case model.FaultTolerant():
				return fmt.Errorf("feldera pipeline was redeployed (deployment %s → %s); it has fault tolerance (%s), so it resumed from a checkpoint: checking what it restored, then replaying from the slot", p.DeploymentID, *pipe.DeploymentID, model)
			case c.cfg.SnapshotMode == SnapshotNever:
				c.logger.Error("feldera pipeline was redeployed without fault tolerance: it lost the rows pgfeldera acknowledged, and SNAPSHOT_MODE=never cannot reseed it; run with SNAPSHOT_MODE=initial to resnapshot",
					"deployment_id", *pipe.DeploymentID)
				p.DeploymentID = *pipe.DeploymentID
				p.Incarnation = "" // read again below, next time
				return nil
			}
			return fmt.Errorf("feldera pipeline was redeployed (deployment %s → %s) without fault tolerance: its state is lost; resnapshotting", p.DeploymentID, *pipe.DeploymentID)
		}
	}
	if statsErr != nil || st.GlobalMetrics.IncarnationUUID == "" {
		return nil
	}
	now := st.GlobalMetrics.IncarnationUUID
	switch {
	case p.Incarnation == "":
		p.Incarnation = now
	case now == p.Incarnation:
		c.seenAt.Store(began.UnixNano()) // what completed before began, the session's process completed
	case p.FaultTolerant:
		return fmt.Errorf("feldera pipeline restarted in place (incarnation %s → %s); it has fault tolerance (%s): checking what it restored, then replaying from the slot", p.Incarnation, now, p.Model)
	case c.cfg.SnapshotMode == SnapshotNever:
		c.logger.Error("feldera pipeline restarted without fault tolerance: it lost the rows pgfeldera acknowledged, and SNAPSHOT_MODE=never cannot reseed it; run with SNAPSHOT_MODE=initial to resnapshot", "incarnation_uuid", now)
		p.Incarnation = now
	default:
		return fmt.Errorf("feldera pipeline restarted in place (incarnation %s → %s) without fault tolerance: its state is lost; resnapshotting", p.Incarnation, now)
	}
	return nil
}

// awaitCheckpoint asks Feldera for a checkpoint and waits until a fresh
// one (freshCheckpoint) covers step. Requests coalesce (one that arrives
// while a checkpoint is written is answered by that one, which may not
// cover step), so it reads coverage from /checkpoints and asks again
// while it falls short.
func (c *Connector) awaitCheckpoint(ctx context.Context, p *setup.Plan, step uint64) error {
	var seq uint64
	for attempt := 0; ; attempt++ {
		if attempt%20 == 0 { // at once, then every 2 s
			s, err := c.sink.RequestCheckpoint(ctx)
			if err != nil {
				return fmt.Errorf("request a checkpoint: %w", err)
			}
			seq = s
		}
		if cp, ok, _ := c.freshCheckpoint(ctx, p); ok {
			c.checkpointed.Store(cp.Steps)
			if cp.Steps >= step {
				return nil
			}
		}
		if attempt%20 == 19 {
			c.checkFailure(ctx, seq)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for a checkpoint to cover step %d: %w", step, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

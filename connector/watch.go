package connector

import (
	"context"
	"fmt"
	"time"
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
//     place. With fault tolerance, Feldera restored what a checkpoint (or
//     the journal) holds, which covers everything acknowledged: the session
//     ends and the next one replays from the slot. Without it the state is
//     gone: the session ends and the next startup resnapshots (the state
//     file records the incarnation the tables were copied into).
//   - a new deployment_id without fault tolerance: the same resnapshot.
//     With fault tolerance the pipeline resumed from its checkpoint: the
//     session ends and replays from the slot.
//
// Under the checkpoint gate it also publishes the newest checkpoint's
// steps, and asks for a checkpoint when completed work has waited
// CheckpointAfter for one.
func (c *Connector) watchPipeline(ctx context.Context, p *plan, alert func()) <-chan error {
	lost := make(chan error, 1)
	c.checkpointed.Store(0)
	c.checkpointWaits.Store(0)
	go func() {
		every := 2 * time.Second
		if p.gate == GateCheckpoint {
			every = checkpointPoll
		}
		t := time.NewTicker(every)
		defer t.Stop()
		var asked time.Time
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if p.gate == GateCheckpoint {
				if cps, err := c.sink.Checkpoints(ctx); err == nil && len(cps) > 0 {
					c.checkpointed.Store(cps[len(cps)-1].Steps)
				}
				if since := c.checkpointWaits.Load(); since != 0 && time.Since(time.Unix(0, since)) >= c.cfg.CheckpointAfter && time.Since(asked) >= c.cfg.CheckpointAfter {
					asked = time.Now()
					if _, err := c.sink.RequestCheckpoint(ctx); err != nil {
						c.logger.Warn("feldera: checkpoint request failed; waiting for the pipeline's own", "err", err)
					} else {
						c.logger.Info("feldera: asked for a checkpoint: completed work waited for one", "waited", time.Since(time.Unix(0, since)).Round(time.Millisecond), "checkpoint_after", c.cfg.CheckpointAfter)
					}
				}
			}
			if p.gate == GateCheckpoint && n%4 != 3 {
				continue // the restart checks below run every 2 s
			}
			if err := c.checkRestart(ctx, p); err != nil {
				lost <- err
				alert() // wake the receive loop: a restart is noticed at once, not at the next status
				return
			}
		}
	}()
	return lost
}

// checkRestart compares the pipeline's deployment and incarnation with
// the ones the session started with (see watchPipeline).
func (c *Connector) checkRestart(ctx context.Context, p *plan) error {
	if p.deploymentID != "" {
		pipe, err := c.sink.Pipeline(ctx)
		if err == nil && pipe.DeploymentID != nil && *pipe.DeploymentID != p.deploymentID {
			model, err := pipe.FaultToleranceModel()
			switch {
			case err != nil:
				return fatal(fmt.Errorf("feldera pipeline was redeployed (deployment %s → %s): %w", p.deploymentID, *pipe.DeploymentID, err))
			case model.FaultTolerant():
				return fmt.Errorf("feldera pipeline was redeployed (deployment %s → %s); it has fault tolerance (%s), so it resumed from its checkpoint: replaying from the slot", p.deploymentID, *pipe.DeploymentID, model)
			case c.cfg.SnapshotMode == SnapshotNever:
				c.logger.Error("feldera pipeline was redeployed without fault tolerance: it lost the rows pgfeldera acknowledged, and SNAPSHOT_MODE=never cannot reseed it; run with SNAPSHOT_MODE=initial to resnapshot",
					"deployment_id", *pipe.DeploymentID)
				p.deploymentID = *pipe.DeploymentID
				p.incarnation = "" // read again below, next time
				return nil
			}
			return fmt.Errorf("feldera pipeline was redeployed (deployment %s → %s) without fault tolerance: its state is lost; resnapshotting", p.deploymentID, *pipe.DeploymentID)
		}
	}
	st, err := c.sink.Stats(ctx)
	if err != nil || st.GlobalMetrics.IncarnationUUID == "" {
		return nil
	}
	now := st.GlobalMetrics.IncarnationUUID
	switch {
	case p.incarnation == "":
		p.incarnation = now
	case now == p.incarnation:
	case p.faultTolerant:
		return fmt.Errorf("feldera pipeline restarted in place (incarnation %s → %s); it has fault tolerance (%s), so it kept what was acknowledged: replaying from the slot", p.incarnation, now, p.model)
	case c.cfg.SnapshotMode == SnapshotNever:
		c.logger.Error("feldera pipeline restarted without fault tolerance: it lost the rows pgfeldera acknowledged, and SNAPSHOT_MODE=never cannot reseed it; run with SNAPSHOT_MODE=initial to resnapshot", "incarnation_uuid", now)
		p.incarnation = now
	default:
		return fmt.Errorf("feldera pipeline restarted in place (incarnation %s → %s) without fault tolerance: its state is lost; resnapshotting", p.incarnation, now)
	}
	return nil
}

// awaitCheckpoint asks Feldera for a checkpoint and waits until the newest
// one covers step. Requests coalesce (one that arrives while a checkpoint
// is written is answered by that one, which may not cover step), so it
// reads coverage from /checkpoints and asks again while it falls short.
func (c *Connector) awaitCheckpoint(ctx context.Context, step uint64) error {
	for attempt := 0; ; attempt++ {
		if attempt%20 == 0 { // at once, then every 2 s
			if _, err := c.sink.RequestCheckpoint(ctx); err != nil {
				return fmt.Errorf("request a checkpoint: %w", err)
			}
		}
		cps, err := c.sink.Checkpoints(ctx)
		if err != nil {
			return fmt.Errorf("read checkpoints: %w", err)
		}
		if n := len(cps); n > 0 {
			c.checkpointed.Store(cps[n-1].Steps)
			if cps[n-1].Steps >= step {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for a checkpoint to cover step %d: %w", step, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

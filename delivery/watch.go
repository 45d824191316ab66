package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// Watching the pipeline while a session streams: restarts, redeploys and,
// under the checkpoint gate, checkpoints.

// WatchAPI is what the pipeline watcher reads of Feldera.
// *feldera.Client satisfies it.
type WatchAPI interface {
	Stats(ctx context.Context) (*feldera.Stats, error)
	Pipeline(ctx context.Context) (*feldera.Pipeline, error)
	Checkpoints(ctx context.Context) ([]feldera.Checkpoint, error)
	RequestCheckpoint(ctx context.Context) (uint64, error)
	CheckpointStatus(ctx context.Context) (*feldera.CheckpointStatus, error)
}

// Watched is what a session knows of the pipeline it feeds, as the
// watcher keeps it: the watcher moves it to a new deployment or process
// when the tables are kept across one (SNAPSHOT_MODE=never), and learns
// the process when the session began without it.
type Watched struct {
	DeploymentID  string
	Incarnation   string // the process fed; "" until known
	FaultTolerant bool
	Model         feldera.FTModel
	Gate          Gate
	CkptBefore    map[string]bool // checkpoints listed before the session: they cover nothing it completes
	WALBudget     int64           // FELDERA_CHECKPOINT_WAL in bytes; 0: by time only
}

// Checkpoints is what the session, the watcher and the metrics share of
// checkpoints. Safe for concurrent use.
type Checkpoints struct {
	Steps  atomic.Uint64 // the newest fresh checkpoint's steps the watcher saw
	SeenAt atomic.Int64  // unix ns: when the watcher's last look that found the session's process began
	// Waits (unix ns since completed work waits for one; 0: none) and WAL
	// (the bytes that work holds) are the session's, read by the watcher
	// and the metrics.
	Waits, WAL atomic.Int64
	Last       atomic.Pointer[[]feldera.Checkpoint] // the list whose newest is the newest fresh checkpoint
	// Failed: a checkpoint asked for failed, and none succeeded since
	// (Error says why); Failures counts them.
	Failed    atomic.Bool
	Error     atomic.Pointer[string]
	Failures  *atomic.Int64
	failedSeq atomic.Uint64 // the last failed checkpoint reported
	// succeeded is the newest fresh checkpoint the watcher saw: only a
	// newer one clears Failed.
	succeeded atomic.Pointer[string]
}

// Watcher watches the pipeline while a session streams (Start), and waits
// for checkpoints (AwaitCheckpoint).
type Watcher struct {
	API WatchAPI
	CP  *Checkpoints
	P   Watched
	// Never is SNAPSHOT_MODE=never: a Feldera that lost the tables is
	// reported, and followed, not resnapshotted.
	Never           bool
	CheckpointAfter time.Duration // FELDERA_CHECKPOINT_AFTER
	// Also is one more look on the watcher's schedule, the n-th (the
	// partitions of partitioned tables); an error ends the session.
	Also func(ctx context.Context, n int) error
	// TrustCheckpoints: any newest checkpoint covers by its steps (a
	// test's unsafe variant).
	TrustCheckpoints bool
	Logger           *slog.Logger

	// mu guards P's DeploymentID and Incarnation, which the watcher's
	// goroutine moves while the session may wait for a checkpoint
	// (AwaitCheckpoint during a graceful stop, before the join).
	mu sync.Mutex
}

// follow moves P to the deployment and process the watcher follows now.
func (c *Watcher) follow(deployment, incarnation string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.P.DeploymentID, c.P.Incarnation = deployment, incarnation
}

// incarnation is the process P follows ("" until known).
func (c *Watcher) incarnation() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.P.Incarnation
}

// CheckpointPoll is how often the watcher reads /checkpoints while
// completed work waits for one, and /stats for a restart.
const CheckpointPoll = 500 * time.Millisecond

// Start polls the pipeline while the session streams, so that a
// Feldera restart is noticed even when no token is outstanding:
//
//   - a new incarnation_uuid under the same deployment_id is a restart in
//     place: the session ends, and the next one checks what the restart
//     restored (setup.RestoredEnough) before it replays from the slot; without
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
// session joins it before it ends. P moves meanwhile (follow), under mu.
func (c *Watcher) Start(ctx context.Context, wg *sync.WaitGroup, alert, looked func()) <-chan error {
	lost := make(chan error, 1)
	p := &c.P
	c.CP.Steps.Store(0)
	c.CP.SeenAt.Store(0)
	c.CP.Waits.Store(0)
	c.CP.WAL.Store(0)
	// Under exactly_once a completion is acknowledged once a look begun
	// after it found the session's process (the Ledger confirms): the looks
	// come as often as checkpoint polls, and each wakes the receive loop,
	// so acknowledgements trail completions by half a second, not two.
	confirming := p.Model == feldera.FTExactlyOnce
	wg.Add(1)
	go func() {
		defer wg.Done()
		every := 2 * time.Second
		if p.Gate == GateCheckpoint || confirming {
			every = CheckpointPoll
		}
		t := time.NewTicker(every)
		defer t.Stop()
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
			if err == nil && c.Also != nil {
				err = c.Also(ctx, n)
			}
			if err != nil {
				if ctx.Err() != nil {
					return // stopped during a look: that says nothing of the pipeline
				}
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
func (c *Watcher) lookAtCheckpoints(ctx context.Context, p *Watched, ask *asker) {
	cp, ok, same := c.freshCheckpoint(ctx, p)
	now := time.Now()
	if ok {
		c.CP.Steps.Store(cp.Steps)
		if last := c.CP.succeeded.Load(); last == nil || *last != cp.UUID {
			// A checkpoint that succeeded since: the one seen at every
			// look until then does not clear a later failure.
			c.CP.succeeded.Store(&cp.UUID)
			c.CP.Failed.Store(false)
		}
		ask.seen(cp.UUID, now)
	}
	// A checkpoint is asked for only of the process the session feeds
	// (freshCheckpoint read /stats after the list): one of a restarted
	// process would hold what was sent to it before the restart was seen,
	// and make it look like a later history than the one restored.
	var waiting time.Time
	if at := c.CP.Waits.Load(); at != 0 && same {
		waiting = time.Unix(0, at)
	}
	wal := c.CP.WAL.Load()
	if why := ask.due(now, waiting, wal, p.WALBudget, c.CheckpointAfter); why != "" {
		s, err := c.API.RequestCheckpoint(ctx)
		ask.asking(now, s, err)
		if err != nil {
			c.Logger.Warn("feldera: checkpoint request failed; waiting for the pipeline's own", "err", err)
		} else {
			c.Logger.Info("feldera: asked for a checkpoint: "+why, "waited", now.Sub(waiting).Round(time.Millisecond),
				"wal_waiting", wal, "checkpoint_after", c.CheckpointAfter, "checkpoint_wal", p.WALBudget)
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
	served := !a.failed && a.newest != a.at && now.Sub(a.newAt) >= 2*CheckpointPoll
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
func (c *Watcher) freshCheckpoint(ctx context.Context, p *Watched) (cp feldera.Checkpoint, ok, same bool) {
	cps, err := c.API.Checkpoints(ctx)
	if err != nil {
		return cp, false, false
	}
	if c.TrustCheckpoints && len(cps) > 0 {
		c.CP.Last.Store(&cps)
		return cps[len(cps)-1], true, true
	}
	st, err := c.API.Stats(ctx)
	inc := c.incarnation()
	if err != nil || inc == "" || st.GlobalMetrics.IncarnationUUID != inc {
		return cp, false, false
	}
	if len(cps) == 0 || p.CkptBefore[cps[len(cps)-1].UUID] {
		return cp, false, true
	}
	c.CP.Last.Store(&cps)
	return cps[len(cps)-1], true, true
}

// checkFailure reports, once, a checkpoint asked for (sequence number seq
// or later) that failed: Feldera answers POST /checkpoint at once and
// writes the checkpoint in the background, so a failure shows only in
// /checkpoint_status. While checkpoints fail, nothing completed is
// acknowledged under at_least_once: /readyz turns 503, the failure is
// counted, and NO_PROGRESS_TIMEOUT ends the process if it lasts.
func (c *Watcher) checkFailure(ctx context.Context, seq uint64) {
	cs, err := c.API.CheckpointStatus(ctx)
	if err != nil || cs.Failure == nil || cs.Failure.SequenceNumber < seq || cs.Failure.SequenceNumber <= c.CP.failedSeq.Load() {
		return
	}
	c.CP.failedSeq.Store(cs.Failure.SequenceNumber)
	c.CP.Failed.Store(true)
	c.CP.Error.Store(&cs.Failure.Error)
	c.CP.Failures.Add(1)
	c.Logger.Error("feldera: a checkpoint failed: nothing completed since the last checkpoint can be acknowledged (at_least_once), and the slot retains WAL meanwhile",
		"checkpoint_sequence_number", cs.Failure.SequenceNumber, "error", cs.Failure.Error)
}

// checkRestart compares the pipeline's deployment and incarnation with
// the ones the session started with (see Start).
func (c *Watcher) checkRestart(ctx context.Context, p *Watched) error {
	began := time.Now()
	// /stats before the pipeline: a redeploy replaces the deployment id
	// before its new process (a new incarnation) answers, so a look that
	// sees the new incarnation also sees the new deployment, and names a
	// redeploy as one, not as a restart in place.
	st, statsErr := c.API.Stats(ctx)
	if p.DeploymentID != "" {
		pipe, err := c.API.Pipeline(ctx)
		if err == nil && pipe.DeploymentID != nil && *pipe.DeploymentID != p.DeploymentID {
			model, err := pipe.FaultToleranceModel()
			switch {
			case err != nil:
				return fatal.Wrap(fmt.Errorf("feldera pipeline was redeployed (deployment %s → %s): %w", p.DeploymentID, *pipe.DeploymentID, err))
			case model.FaultTolerant():
				return fmt.Errorf("feldera pipeline was redeployed (deployment %s → %s); it has fault tolerance (%s), so it resumed from a checkpoint: checking what it restored, then replaying from the slot", p.DeploymentID, *pipe.DeploymentID, model)
			case c.Never:
				c.Logger.Error("feldera pipeline was redeployed without fault tolerance: it lost the rows pgfeldera acknowledged, and SNAPSHOT_MODE=never cannot reseed it; run with SNAPSHOT_MODE=initial to resnapshot",
					"deployment_id", *pipe.DeploymentID)
				c.follow(*pipe.DeploymentID, "") // the process is read again below, next time
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
		c.follow(p.DeploymentID, now)
	case now == p.Incarnation:
		c.CP.SeenAt.Store(began.UnixNano()) // what completed before began, the session's process completed
	case p.FaultTolerant:
		return fmt.Errorf("feldera pipeline restarted in place (incarnation %s → %s); it has fault tolerance (%s): checking what it restored, then replaying from the slot", p.Incarnation, now, p.Model)
	case c.Never:
		c.Logger.Error("feldera pipeline restarted without fault tolerance: it lost the rows pgfeldera acknowledged, and SNAPSHOT_MODE=never cannot reseed it; run with SNAPSHOT_MODE=initial to resnapshot", "incarnation_uuid", now)
		c.follow(p.DeploymentID, now)
	default:
		return fmt.Errorf("feldera pipeline restarted in place (incarnation %s → %s) without fault tolerance: its state is lost; resnapshotting", p.Incarnation, now)
	}
	return nil
}

// AwaitCheckpoint asks Feldera for a checkpoint and waits until a fresh
// one (freshCheckpoint) covers step. Requests coalesce (one that arrives
// while a checkpoint is written is answered by that one, which may not
// cover step), so it reads coverage from /checkpoints and asks again
// while it falls short.
func (c *Watcher) AwaitCheckpoint(ctx context.Context, step uint64) error {
	p := &c.P
	var seq uint64
	for attempt := 0; ; attempt++ {
		if attempt%20 == 0 { // at once, then every 2 s
			s, err := c.API.RequestCheckpoint(ctx)
			if err != nil {
				return fmt.Errorf("request a checkpoint: %w", err)
			}
			seq = s
		}
		if cp, ok, _ := c.freshCheckpoint(ctx, p); ok {
			c.CP.Steps.Store(cp.Steps)
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

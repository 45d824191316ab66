package delivery

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// fakePipeline answers the watcher: one process, "x", whose checkpoint
// covering step 5 appears once coverAfter has passed.
type fakePipeline struct {
	start      time.Time
	coverAfter time.Duration
	requests   atomic.Int64
}

func (f *fakePipeline) Stats(context.Context) (*feldera.Stats, error) {
	st := &feldera.Stats{}
	st.GlobalMetrics.IncarnationUUID = "x"
	return st, nil
}

func (f *fakePipeline) Pipeline(context.Context) (*feldera.Pipeline, error) {
	return &feldera.Pipeline{}, nil
}

func (f *fakePipeline) Checkpoints(context.Context) ([]feldera.Checkpoint, error) {
	if time.Since(f.start) < f.coverAfter {
		return nil, nil
	}
	return []feldera.Checkpoint{{UUID: "c1", Steps: 5}}, nil
}

func (f *fakePipeline) RequestCheckpoint(context.Context) (uint64, error) {
	return uint64(f.requests.Add(1)), nil
}

func (f *fakePipeline) CheckpointStatus(context.Context) (*feldera.CheckpointStatus, error) {
	return &feldera.CheckpointStatus{}, nil
}

// A session that began without knowing the pipeline's process waits for
// a checkpoint (as a graceful stop does) while its watcher learns the
// process: the watcher moves its pipeline under its lock, so the wait
// reads it safely (go test -race sees the race without the lock), and the
// wait ends once a checkpoint of that process covers the step.
func TestWatcher_AwaitCheckpointBesideTheWatcher(t *testing.T) {
	f := &fakePipeline{start: time.Now(), coverAfter: 2 * CheckpointPoll}
	w := &Watcher{
		API: f, CP: &Checkpoints{Failures: new(atomic.Int64)},
		P:      Watched{FaultTolerant: true, Model: feldera.FTAtLeastOnce, Gate: GateCheckpoint, CkptBefore: map[string]bool{}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	lost := w.Start(ctx, &wg, func() {}, func() {})
	defer func() {
		stop()
		wg.Wait()
	}()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := w.AwaitCheckpoint(wctx, 5); err != nil {
		t.Fatalf("AwaitCheckpoint: %v", err)
	}
	select {
	case err := <-lost:
		t.Fatalf("the watcher reported %v", err)
	default:
	}
	if got := w.incarnation(); got != "x" {
		t.Fatalf("the watcher follows process %q, want the pipeline's, x", got)
	}
}

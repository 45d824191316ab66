package delivery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// newTestPipeline is a pipeline of one route whose Sender counts into
// fresh counters; its events go to the returned channel.
func newTestPipeline() (*Pipeline, chan Event) {
	p := NewPipeline(1, GateComplete, 0, false)
	events := make(chan Event, EventBuffer)
	p.Sender = &Sender{Batches: &atomic.Int64{}, FlushSince: &atomic.Int64{}, FlushFailed: &atomic.Bool{}}
	p.Emit = func(e Event) { events <- e }
	p.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return p, events
}

// The pipeline's side of the completer: each completion reaches the loop
// as a Completed event with its batch and step, counted on the way; a
// completion without its step under the checkpoint gate is fatal once
// applied, as retrying cannot bring the step back, and a completion
// timeout is not.
func TestPipeline_CompleterEvents(t *testing.T) {
	p, events := newTestPipeline()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	k := &Completer{Observer: nopObserver{}, Txn: &TxnClock{}, Timeout: time.Second, NeedStep: func() bool { return true },
		Logger: p.Logger}
	p.Start(ctx, k)
	p.Wait()

	k.Done(&Flight{ID: 3}, 7)
	k.Emit(Completion{ID: 3, Step: 7})
	if ev := <-events; ev.Kind != Completed || ev.ID != 3 || ev.Step != 7 || ev.Err != nil {
		t.Fatalf("completion of batch 3 at step 7: event %+v", ev)
	}
	if got := p.Sender.Batches.Load(); got != 1 {
		t.Fatalf("%d batches counted after one completion", got)
	}

	k.Emit(Completion{Err: fmt.Errorf("%w: batch 4 on users", ErrNoStep)})
	ev := <-events
	if _, err := p.Apply(ev); ev.Kind != Completed || !fatal.Is(err) || !p.Sender.FlushFailed.Load() {
		t.Fatalf("a completion without its step: event %+v, applied %v; want a fatal error", ev, err)
	}
	k.Emit(Completion{Err: fmt.Errorf("%w: batch 5 not complete", ErrFelderaUnavailable)})
	ev = <-events
	if _, err := p.Apply(ev); ev.Kind != Completed || err == nil || fatal.Is(err) {
		t.Fatalf("a completion timeout: event %+v, applied %v; want an error the next session retries", ev, err)
	}
}

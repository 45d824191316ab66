package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

var (
	_ Sink = (*feldera.Client)(nil)
)

// fakeSink takes every push, answering token "table:n", and completes
// each at step.
type fakeSink struct {
	pushed []string // table:rows lines
	step   uint64
	block  bool // WaitCompleteStep waits for its context
}

func (f *fakeSink) Ingress(_ context.Context, table string, body []byte) (string, error) {
	f.pushed = append(f.pushed, fmt.Sprintf("%s:%d", table, strings.Count(string(body), "\n")))
	return fmt.Sprintf("%s:%d", table, len(f.pushed)), nil
}

func (f *fakeSink) WaitCompleteStep(ctx context.Context, _ string) (uint64, error) {
	if f.block {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return f.step, nil
}

func (f *fakeSink) Query(context.Context, string, func(json.RawMessage) error) error { return nil }

type counters struct {
	step        atomic.Uint64
	batches     atomic.Int64
	flushSince  atomic.Int64
	flushFailed atomic.Bool
}

func newSender(sink Sink, need bool, n *counters) *Sender {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	fence := NewFence(time.Second, logger)
	return &Sender{
		Sink: sink, Fence: fence, Txns: &Transactions{Fence: fence, Logger: logger}, Observer: nopObserver{}, Logger: logger,
		HardStop: context.WithoutCancel, CompletionTimeout: 200 * time.Millisecond,
		NeedStep: func() bool { return need },
		Batches:  &n.batches, FlushSince: &n.flushSince, FlushFailed: &n.flushFailed,
	}
}

// batchOf holds rows lines for each of two routes, "a" and "b".
func twoTableBatch(a, b int) (*Batch, []*decode.Target) {
	targets := []*decode.Target{{Route: 0, Dest: feldera.Relation{Name: "a"}}, {Route: 1, Dest: feldera.Relation{Name: "b"}}}
	bt := NewBatch(2)
	for route, n := range []int{a, b} {
		for range n {
			bt.Bufs[route] = append(bt.Bufs[route], "{}\n"...)
		}
		bt.Added(route, n, time.Now())
	}
	return bt, targets
}

// Flush POSTs each route that has rows, waits for every token, raises
// the step watermark, counts the batch and clears the health marks.
func TestSender_Flush(t *testing.T) {
	sink := &fakeSink{step: 9}
	var n counters
	n.flushFailed.Store(true)
	s := newSender(sink, true, &n)
	s.RaiseSyncStep(4)
	b, targets := twoTableBatch(3, 0)
	if err := s.Flush(context.Background(), targets, b, true); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sink.pushed, ","); got != "a:3" {
		t.Fatalf("pushed %s, want a:3 (an empty route sends nothing)", got)
	}
	if s.SyncStep() != 9 || n.batches.Load() != 1 || n.flushSince.Load() != 0 || n.flushFailed.Load() {
		t.Fatalf("step %d, batches %d, flushSince %d, flushFailed %v; want 9, 1, 0, false",
			s.SyncStep(), n.batches.Load(), n.flushSince.Load(), n.flushFailed.Load())
	}
}

// A completion without its step is fatal where the step is needed, and
// the failed flush shows in the health marks.
func TestSender_FlushWithoutStep(t *testing.T) {
	for _, need := range []bool{false, true} {
		var n counters
		s := newSender(&fakeSink{}, need, &n)
		b, targets := twoTableBatch(1, 2)
		err := s.Flush(context.Background(), targets, b, true)
		if !need {
			if err != nil {
				t.Fatalf("no step needed: %v", err)
			}
			continue
		}
		if !errors.Is(err, ErrNoStep) || !fatal.Is(err) || !strings.Contains(err.Error(), "complete without its step") {
			t.Fatalf("Flush = %v, want a fatal ErrNoStep", err)
		}
		if !n.flushFailed.Load() || n.batches.Load() != 0 {
			t.Fatalf("flushFailed %v, batches %d after a failed flush", n.flushFailed.Load(), n.batches.Load())
		}
	}
}

// A batch that does not complete within FELDERA_COMPLETION_TIMEOUT ends
// the flush with ErrFelderaUnavailable.
func TestSender_FlushCompletionTimeout(t *testing.T) {
	var n counters
	s := newSender(&fakeSink{block: true}, false, &n)
	b, targets := twoTableBatch(1, 0)
	err := s.Flush(context.Background(), targets, b, true)
	if !errors.Is(err, ErrFelderaUnavailable) || !strings.Contains(err.Error(), "FELDERA_COMPLETION_TIMEOUT") {
		t.Fatalf("Flush = %v, want ErrFelderaUnavailable", err)
	}
}

// Send without a Feldera transaction only POSTs: it waits for nothing.
func TestSender_SendPlainPlan(t *testing.T) {
	sink := &fakeSink{block: true}
	var n counters
	s := newSender(sink, false, &n)
	b, targets := twoTableBatch(2, 1)
	tokens, _, mark, err := s.Send(context.Background(), targets, b, PlanTxn(TxnOff, false, false, true, 2))
	if err != nil || len(tokens) != 2 || mark != nil {
		t.Fatalf("Send = %d tokens, mark %v, err %v; want 2 tokens, no mark", len(tokens), mark, err)
	}
	if tokens[0].Table != "a" || tokens[1].Table != "b" || n.batches.Load() != 0 {
		t.Fatalf("tokens %+v %+v, batches %d", tokens[0], tokens[1], n.batches.Load())
	}
}

func TestRaise(t *testing.T) {
	var v atomic.Uint64
	for _, x := range []uint64{3, 1, 7, 5} {
		Raise(&v, x)
	}
	if v.Load() != 7 {
		t.Fatalf("Raise kept %d, want the largest, 7", v.Load())
	}
}

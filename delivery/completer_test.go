package delivery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// fakeCompletion answers /completion_status for tokens "table:n": a table's
// tokens complete in order, up to done[table], at step n.
type fakeCompletion struct {
	mu    sync.Mutex
	done  map[string]int
	polls int
	err   error
}

func (f *fakeCompletion) CompletionStep(_ context.Context, token string) (bool, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.polls++
	if f.err != nil {
		return false, 0, f.err
	}
	var table string
	var n int
	fmt.Sscanf(strings.Replace(token, ":", " ", 1), "%s %d", &table, &n)
	if n <= f.done[table] {
		return true, uint64(n), nil
	}
	return false, 0, nil
}

func (f *fakeCompletion) set(table string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done[table] = n
}

func (f *fakeCompletion) pollCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.polls
}

// nopObserver sees nothing.
type nopObserver struct{}

func (nopObserver) Batch(int, time.Duration, time.Duration) {}
func (nopObserver) FelderaError(string)                     {}

func newCompleterTest(t *testing.T, timeout time.Duration) (*fakeCompletion, chan *Flight, chan Completion) {
	sink := &fakeCompletion{done: map[string]int{}}
	in, out := make(chan *Flight, 64), make(chan Completion, 64)
	ctx, cancel := context.WithCancel(context.Background())
	k := &Completer{
		In: in, Poll: sink, Observer: nopObserver{}, Txn: &TxnClock{}, Timeout: timeout,
		NeedStep: func() bool { return false },
		Done:     func(*Flight, uint64) {},
		Emit:     func(d Completion) { out <- d },
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	done := make(chan struct{})
	go func() { k.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return sink, in, out
}

func batchOf(id uint64, tables ...string) *Flight {
	f := &Flight{ID: id, Seq: int(id), Start: time.Now(), Sent: time.Now()}
	for _, tb := range tables {
		f.Tokens = append(f.Tokens, &Token{Table: strings.Split(tb, ":")[0], Token: tb})
	}
	return f
}

func want(t *testing.T, out chan Completion, ids ...uint64) {
	t.Helper()
	for _, id := range ids {
		select {
		case ev := <-out:
			if ev.Err != nil || ev.ID != id {
				t.Fatalf("event %+v, want the completion of %d", ev, id)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no completion of %d", id)
		}
	}
}

// One answer about the newest token of an endpoint completes every batch
// before it: ten batches cost a handful of polls, not ten waits.
func TestCompleter_OnePollCoversEarlierTokens(t *testing.T) {
	sink, in, out := newCompleterTest(t, time.Minute)
	for i := 1; i <= 10; i++ {
		in <- batchOf(uint64(i), fmt.Sprintf("a:%d", i))
	}
	time.Sleep(50 * time.Millisecond) // all queued, none complete: the completer polls the oldest only
	before := sink.pollCount()
	sink.set("a", 10)
	want(t, out, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	if n := sink.pollCount() - before; n > 3 {
		t.Fatalf("%d polls to see ten complete batches; the oldest and the newest token should do", n)
	}
}

// Completion in steps: the oldest batches are reported as soon as their
// tokens complete, whatever the newer ones do; a batch with tokens on two
// tables waits for both.
func TestCompleter_PrefixAndTables(t *testing.T) {
	sink, in, out := newCompleterTest(t, time.Minute)
	in <- batchOf(1, "a:1", "b:1")
	in <- batchOf(2, "a:2")
	in <- batchOf(3, "a:3", "b:2")
	sink.set("a", 3)
	want(t, out, 2) // 1 and 3 wait for b
	sink.set("b", 1)
	want(t, out, 1)
	select {
	case ev := <-out:
		t.Fatalf("unexpected %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}
	sink.set("b", 2)
	want(t, out, 3)
}

// A failed poll (the pipeline restarted: 410) and a batch older than
// FELDERA_COMPLETION_TIMEOUT each end the completer with an error naming
// what happened; nothing is reported complete.
func TestCompleter_Failures(t *testing.T) {
	t.Run("restarted", func(t *testing.T) {
		sink, in, out := newCompleterTest(t, time.Minute)
		sink.err = &feldera.APIError{Op: "GET completion_status", StatusCode: 410, Code: feldera.CodePipelineRestarted}
		in <- batchOf(1, "a:1")
		ev := <-out
		if ev.Err == nil || !strings.Contains(ev.Err.Error(), "restarted") {
			t.Fatalf("got %+v", ev)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		_, in, out := newCompleterTest(t, 200*time.Millisecond)
		in <- batchOf(1, "a:1")
		ev := <-out
		if ev.Err == nil || !strings.Contains(ev.Err.Error(), "FELDERA_COMPLETION_TIMEOUT") {
			t.Fatalf("got %+v", ev)
		}
	})
}

// A completion without its step is refused only where the step is
// needed (the checkpoint gate), and then fatally, as ErrNoStep, with the
// words the users and the tests look for.
func TestCheckStep(t *testing.T) {
	for _, tc := range []struct {
		step uint64
		need bool
		err  bool
	}{
		{0, false, false},
		{7, false, false},
		{7, true, false},
		{0, true, true},
	} {
		err := CheckStep(tc.step, tc.need, func() string { return "batch 3 on users" })
		if (err != nil) != tc.err {
			t.Fatalf("CheckStep(%d, %v) = %v, want an error: %v", tc.step, tc.need, err, tc.err)
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrNoStep) || !fatal.Is(err) || !strings.Contains(err.Error(), "batch 3 on users complete without its step") || !strings.Contains(err.Error(), "upgrade Feldera") {
			t.Fatalf("CheckStep(0, true) = %v: want a fatal ErrNoStep naming the batch", err)
		}
	}
}

// A batch inside a Feldera transaction whose records were all skipped
// carries no token: it completes only once its transaction committed, at
// the commit's step, never at once (which would acknowledge its COMMITs
// before Feldera holds the transaction).
func TestCompleter_TokenlessBatchWaitsForItsCommit(t *testing.T) {
	_, in, out := newCompleterTest(t, time.Minute)
	mark := &TxnMark{}
	f := batchOf(1)
	f.Txn = mark
	in <- f
	select {
	case ev := <-out:
		t.Fatalf("a tokenless batch of an open transaction completed before the commit: %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
	mark.Committed(time.Now(), 42)
	select {
	case ev := <-out:
		if ev.Err != nil || ev.ID != 1 || ev.Step != 42 {
			t.Fatalf("event %+v, want batch 1 complete at the commit's step 42", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the tokenless batch did not complete after its transaction committed")
	}
}

// A completer whose context ends returns, even while a batch that only
// its transaction's commit can complete waits in its queue: no poll
// fails for it, so nothing else would end the loop.
func TestCompleter_EndsWithATokenlessBatchWaiting(t *testing.T) {
	in, out := make(chan *Flight, 1), make(chan Completion, 4)
	ctx, cancel := context.WithCancel(context.Background())
	k := &Completer{
		In: in, Poll: &fakeCompletion{done: map[string]int{}}, Observer: nopObserver{}, Txn: &TxnClock{}, Timeout: time.Minute,
		NeedStep: func() bool { return false }, Done: func(*Flight, uint64) {},
		Emit:   func(d Completion) { out <- d },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	f := batchOf(1)
	f.Txn = &TxnMark{}
	in <- f
	done := make(chan struct{})
	go func() { k.Run(ctx); close(done) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the completer kept running after its context ended")
	}
}

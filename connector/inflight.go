package connector

import (
	"context"
	"sync"

	"github.com/pgfeldera/pgfeldera/delivery"
)

// event is what the session's goroutines report to its loop: the
// pipeline's (a POST answered, a completion, a retraction), or the
// incremental snapshot's worker failing (chunk).
type event struct {
	out   delivery.Event
	chunk error
}

// waker wakes the stream loop out of a receive when an event arrives. The
// loop arms it before it drains the event channel; producers send, then
// fire, so no event waits for the next status interval.
type waker struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
}

func (w *waker) arm(parent context.Context) context.Context {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil || w.ctx.Err() != nil {
		w.ctx, w.cancel = context.WithCancel(parent)
	}
	return w.ctx
}

func (w *waker) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
	}
}

// completer is the session's delivery.Completer (the pipeline wires its
// input, its count and its events).
func (s *stream) completer() *delivery.Completer {
	c := s.c
	return &delivery.Completer{
		Poll: c.sink, Observer: c.observer, Txn: &c.txns.Clock,
		Timeout:  c.cfg.CompletionTimeout,
		NeedStep: func() bool { return c.Gate() == delivery.GateCheckpoint },
		Logger:   c.logger,
	}
}

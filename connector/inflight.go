package connector

import (
	"context"
	"errors"
	"sync"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// Batches in flight: the stream POSTs them in source order, one request at
// a time (never a POST before the previous one was answered, so Feldera
// queues them in commit order), and does not wait for completion before
// the next POST: up to BATCH_MAX_IN_FLIGHT batches have tokens outstanding
// at once. A batch in flight holds only its tokens; its rows are in
// Feldera, and a failure replays them from the slot. The frontier decides
// what may be acknowledged.

// eventKind says what an event reports to the stream loop.
type eventKind int

const (
	evPosted    eventKind = iota // a POST ended: its batch's buffers are free again
	evComplete                   // a batch in flight completed, or the completer failed
	evRetracted                  // a retraction job ended
	evChunk                      // the incremental snapshot's worker failed
)

type event struct {
	kind   eventKind
	b      *delivery.Batch // evPosted
	id     uint64          // the frontier's id of the batch
	step   uint64          // evComplete: the step that processed it; evRetracted: the highest step of the retraction
	ackNow bool            // evPosted under ACK_MODE=accepted: complete at the POST's answer
	err    error
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

// maxTxnFlight bounds the batches in flight inside one Feldera
// transaction (see stream.canPost).
const maxTxnFlight = 1024

// completer is the session's delivery.Completer: it reports each batch
// complete to the loop, and counts it on the way.
func (s *stream) completer() *delivery.Completer {
	c := s.c
	return &delivery.Completer{
		In: s.flights, Poll: c.sink, Observer: c.observer, Txn: &c.txns.Clock,
		Timeout:  c.cfg.CompletionTimeout,
		NeedStep: func() bool { return c.Gate() == GateCheckpoint },
		Done: func(f *delivery.Flight, _ uint64) {
			c.stats.Batches.Add(1)
			if !f.RowOnly {
				crashtest.Point("after_complete")
			}
		},
		Emit: func(d delivery.Completion) {
			err := d.Err
			if errors.Is(err, delivery.ErrNoStep) {
				err = fatal.Wrap(err) // retrying cannot bring the step back
			}
			s.emit(event{kind: evComplete, id: d.ID, step: d.Step, err: err})
		},
		Logger: c.logger,
	}
}

package connector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/outbox"
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
	b      *outbox.Batch // evPosted
	id     uint64        // the frontier's id of the batch
	step   uint64        // evComplete: the step that processed it
	ackNow bool          // evPosted under ACK_MODE=accepted: complete at the POST's answer
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

// send is the poster's work for one batch: under its transaction plan,
// start a Feldera transaction, POST, and commit once Feldera took every
// record. A failure inside a transaction commits it (there is no abort).
func (c *Connector) send(ctx context.Context, targets []*decode.Target, b *outbox.Batch, plan outbox.TxnPlan) ([]*delivery.Token, time.Time, *delivery.TxnMark, error) {
	fail := func(err error) ([]*delivery.Token, time.Time, *delivery.TxnMark, error) {
		if plan.In {
			c.abandonTxn()
		}
		return nil, time.Time{}, nil, err
	}
	if plan.Begin {
		if err := c.waitFence(ctx); err != nil {
			return nil, time.Time{}, nil, err // nothing may be sent yet: not even a transaction opened
		}
		if err := c.txns.Begin(ctx); err != nil {
			return fail(err)
		}
	} else if plan.In {
		if err := c.txns.Room(ctx, b.Total, b.Size()); err != nil {
			return fail(err)
		}
	}
	var mark *delivery.TxnMark
	if plan.In {
		mark = c.txns.Mark()
	}
	tokens, start, err := c.post(ctx, targets, b)
	if err != nil {
		return fail(err)
	}
	if plan.In {
		c.txns.Buffered(b.Total, b.Size())
	}
	if plan.End {
		if err := c.absorbedUnlessHooked(ctx); err != nil {
			return fail(err)
		}
		if err := c.txns.Commit(ctx); err != nil {
			return fail(err)
		}
	}
	return tokens, start, mark, nil
}

// post sends each route's lines of b, one request at a time, and returns
// the tokens and when the first request began (after any fence: a wait
// for the fence is not a wait for Feldera). Any failure leaves the
// position where it was.
func (c *Connector) post(ctx context.Context, targets []*decode.Target, b *outbox.Batch) ([]*delivery.Token, time.Time, error) {
	if err := c.waitFence(ctx); err != nil {
		return nil, time.Time{}, err
	}
	start := time.Now()
	var tokens []*delivery.Token
	for route, buf := range b.Bufs {
		if b.Rows[route] == 0 {
			continue
		}
		table := targets[route].Dest.CanonicalName()
		tok, err := c.fence.Ingress(ctx, c.sink, table, buf, b.Rows[route])
		if err != nil {
			c.observer.FelderaError(feldera.ErrorCode(err))
			return nil, start, fmt.Errorf("push %d rows to %s: %w", b.Rows[route], table, err)
		}
		tokens = append(tokens, &delivery.Token{Table: table, Token: tok})
		c.txns.Posted(table)
	}
	return tokens, start, nil
}

// completer is the session's delivery.Completer: it reports each batch
// complete to the loop, and counts it on the way.
func (s *stream) completer() *delivery.Completer {
	c := s.c
	return &delivery.Completer{
		In: s.flights, Poll: c.sink, Observer: c.observer, Txn: &c.txns.Clock,
		Timeout:  c.cfg.CompletionTimeout,
		NeedStep: func() bool { return c.Gate() == GateCheckpoint },
		Done: func(_ *delivery.Flight, step uint64) {
			raise(&c.maxStep, step)
			c.stats.Batches.Add(1)
			crashtest.Point("after_complete")
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

// absorbedUnlessHooked waits until the Feldera transaction took its input
// (Transactions.Absorbed), which the test hook noFeedWait skips: the
// unsafe variant that shows the wait is what keeps a transaction whole.
func (c *Connector) absorbedUnlessHooked(ctx context.Context) error {
	if c.test.noFeedWait {
		return nil
	}
	return c.txns.Absorbed(ctx)
}

// abandonTxn commits, on a failure path, the Feldera transaction a batch
// left open, bounded by STOP_TIMEOUT (Transactions.Abandon).
func (c *Connector) abandonTxn() {
	c.txns.Abandon(c.stopContext(context.Background()))
}

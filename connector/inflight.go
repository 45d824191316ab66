package connector

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/feldera"
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
	b      *batch // evPosted
	id     uint64 // the frontier's id of the batch
	step   uint64 // evComplete: the step that processed it
	ackNow bool   // evPosted under ACK_MODE=accepted: complete at the POST's answer
	err    error
}

// sentToken is one table's token of a batch in flight.
type sentToken struct {
	table, token string
	done         bool
	step         uint64
}

// flight is what a batch in flight still holds once its POSTs were
// answered.
type flight struct {
	id          uint64
	seq, rows   int
	tokens      []*sentToken
	start, sent time.Time // the first POST's start, the last answer
	warned      bool
	// txn, for a batch sent inside a Feldera transaction: it cannot
	// complete before the commit, so FELDERA_COMPLETION_TIMEOUT counts
	// from the commit (the waits before it are bounded on their own).
	txn *txnMark
}

// txnMark is shared by the batches of one Feldera transaction: when its
// commit finished (UnixNano; 0: not yet).
type txnMark struct{ committed atomic.Int64 }

// since is when a batch's completion wait began: its first POST, or the
// commit of its Feldera transaction; ok is false while that is still to
// come.
func (f *flight) since() (at time.Time, ok bool) {
	if f.txn == nil {
		return f.start, true
	}
	if n := f.txn.committed.Load(); n != 0 {
		return time.Unix(0, n), true
	}
	return time.Time{}, false
}

func (f *flight) complete() bool {
	for _, t := range f.tokens {
		if !t.done {
			return false
		}
	}
	return true
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
func (c *Connector) send(ctx context.Context, targets []*decode.Target, b *batch, plan txnPlan) ([]*sentToken, time.Time, *txnMark, error) {
	fail := func(err error) ([]*sentToken, time.Time, *txnMark, error) {
		if plan.in {
			c.abandonTxn()
		}
		return nil, time.Time{}, nil, err
	}
	if plan.begin {
		if err := c.waitFence(ctx); err != nil {
			return nil, time.Time{}, nil, err // nothing may be sent yet: not even a transaction opened
		}
		if err := c.beginTxn(ctx); err != nil {
			return fail(err)
		}
	} else if plan.in {
		if err := c.txnRoom(ctx, b); err != nil {
			return fail(err)
		}
	}
	var mark *txnMark
	if plan.in {
		mark = c.txn.mark
	}
	tokens, start, err := c.post(ctx, targets, b)
	if err != nil {
		return fail(err)
	}
	if plan.in {
		c.txn.unfedRows += b.total
		c.txn.unfedBytes += b.size()
	}
	if plan.end {
		if err := c.absorbedUnlessHooked(ctx); err != nil {
			return fail(err)
		}
		if err := c.commitTxn(ctx); err != nil {
			return fail(err)
		}
	}
	return tokens, start, mark, nil
}

// post sends each route's lines of b, one request at a time, and returns
// the tokens and when the first request began (after any fence: a wait
// for the fence is not a wait for Feldera). Any failure leaves the
// position where it was.
func (c *Connector) post(ctx context.Context, targets []*decode.Target, b *batch) ([]*sentToken, time.Time, error) {
	if err := c.waitFence(ctx); err != nil {
		return nil, time.Time{}, err
	}
	start := time.Now()
	var tokens []*sentToken
	for route, buf := range b.bufs {
		if b.rows[route] == 0 {
			continue
		}
		table := targets[route].Dest.CanonicalName()
		tok, err := c.fence.Ingress(ctx, c.sink, table, buf, b.rows[route])
		if err != nil {
			c.observer.FelderaError(feldera.ErrorCode(err))
			return nil, start, fmt.Errorf("push %d rows to %s: %w", b.rows[route], table, err)
		}
		tokens = append(tokens, &sentToken{table: table, token: tok})
		if c.txn != nil && c.txn.tables != nil {
			c.txn.tables[table] = true
		}
	}
	return tokens, start, nil
}

// completer waits for the tokens of the batches in flight. Each round it
// asks, per table, about the oldest outstanding token and, when that one
// is complete, the newest: a token covers everything queued before it
// through the same endpoint (API.md §3), so one answer can complete every
// batch in between. Every poll either completes a token or ends its
// table's round, so a round costs a poll per table plus one per token
// completed. Between rounds that found nothing it sleeps an eighth of the
// oldest batch's wait (1 to 25 ms), and wakes at once for a new batch: the
// schedule adds little to a step of any length.
type completer struct {
	c    *Connector
	in   chan *flight // from the poster, in source order
	emit func(event)
}

func (k *completer) run(ctx context.Context) {
	var q []*flight
	for {
		if len(q) == 0 {
			select {
			case f := <-k.in:
				q = append(q, f)
			case <-ctx.Done():
				return
			}
		}
		for more := true; more; {
			select {
			case f := <-k.in:
				q = append(q, f)
			default:
				more = false
			}
		}
		if err := k.overdue(ctx, q[0]); err != nil {
			k.emit(event{kind: evComplete, err: err})
			return
		}
		progressed, err := k.round(ctx, q)
		if err != nil {
			k.emit(event{kind: evComplete, err: err})
			return
		}
		n := 0
		for _, f := range q {
			if !f.complete() {
				q[n] = f
				n++
				continue
			}
			ev, err := k.completed(f)
			if err != nil {
				k.emit(event{kind: evComplete, err: err})
				return
			}
			k.emit(ev)
		}
		clear(q[n:])
		q = q[:n]
		if len(q) == 0 || progressed {
			continue
		}
		wait := min(max(time.Since(q[0].sent)/8, time.Millisecond), 25*time.Millisecond)
		t := time.NewTimer(wait)
		select {
		case f := <-k.in:
			q = append(q, f)
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// overdue fails the oldest batch once it waited FELDERA_COMPLETION_TIMEOUT,
// and warns once when it waited long.
func (k *completer) overdue(ctx context.Context, f *flight) error {
	c := k.c
	from, ok := f.since()
	if !ok || c.txnOpen.Load() {
		// Inside a Feldera transaction not yet committed, or posted
		// before one and swept into it (a transaction takes every record
		// buffered when it starts): it completes at that commit, whose
		// wait is bounded by the commit's progress.
		return nil
	}
	if end := time.Unix(0, c.txnEnded.Load()); end.After(from) {
		from = end
	}
	waited := time.Since(from)
	if ctx.Err() != nil {
		return fmt.Errorf("waiting for batch %d to complete: %w", f.seq, ctx.Err())
	}
	if waited >= c.cfg.CompletionTimeout {
		table := ""
		for _, t := range f.tokens {
			if !t.done {
				table = t.table
				break
			}
		}
		return fmt.Errorf("%w: batch %d on %s not complete after %s (FELDERA_COMPLETION_TIMEOUT): nothing acknowledged", ErrFelderaUnavailable, f.seq, table, waited.Round(time.Millisecond))
	}
	if waited >= completionLogAfter && !f.warned {
		f.warned = true
		c.logger.Warn("flush: waiting for Feldera to complete a batch; WAL is retained on the primary meanwhile", "batch", f.seq, "rows", f.rows)
	}
	return nil
}

// round polls as described on completer and reports whether any token
// completed.
func (k *completer) round(ctx context.Context, q []*flight) (bool, error) {
	var order []string
	byTable := map[string][]*sentToken{}
	for _, f := range q {
		for _, t := range f.tokens {
			if t.done {
				continue
			}
			if _, ok := byTable[t.table]; !ok {
				order = append(order, t.table)
			}
			byTable[t.table] = append(byTable[t.table], t)
		}
	}
	progressed := false
	for _, table := range order {
		toks := byTable[table]
		for len(toks) > 0 {
			done, step, err := k.poll(ctx, toks[0])
			if err != nil {
				return progressed, err
			}
			if !done {
				break // nothing newer on this endpoint is done either
			}
			toks[0].done, toks[0].step = true, step
			progressed = true
			if toks = toks[1:]; len(toks) == 0 {
				break
			}
			last := toks[len(toks)-1]
			if done, step, err = k.poll(ctx, last); err != nil {
				return progressed, err
			}
			if done {
				for _, t := range toks { // covered by the newer token's answer
					t.done, t.step = true, step
				}
				break
			}
			toks = toks[:len(toks)-1] // in progress: the ones between may be done
		}
	}
	return progressed, nil
}

func (k *completer) poll(ctx context.Context, t *sentToken) (bool, uint64, error) {
	done, step, err := k.c.sink.CompletionStep(ctx, t.token)
	if err == nil {
		return done, step, nil
	}
	if code := feldera.ErrorCode(err); code != "" {
		k.c.observer.FelderaError(code)
	}
	if feldera.IsRestarted(err) {
		return false, 0, fmt.Errorf("feldera pipeline restarted before a batch on %s completed: nothing acknowledged; replaying from the slot: %w", t.table, err)
	}
	return false, 0, fmt.Errorf("wait for completion of %s: %w", t.table, err)
}

// completed turns a complete batch into its event.
func (k *completer) completed(f *flight) (event, error) {
	c := k.c
	var step uint64
	for _, t := range f.tokens {
		if t.step == 0 && c.Gate() == GateCheckpoint {
			// Without the step no checkpoint can be shown to cover
			// the batch: never acknowledge it at completion instead.
			return event{}, fatal(fmt.Errorf("feldera reported batch %d on %s complete without its step (GET /completion_status has no \"step\"), which at_least_once needs to know when a checkpoint covers it: upgrade Feldera", f.seq, t.table))
		}
		step = max(step, t.step)
	}
	raise(&c.maxStep, step)
	c.stats.Batches.Add(1)
	c.observer.Batch(f.rows, f.sent.Sub(f.start), time.Since(f.sent))
	crashtest.Point("after_complete")
	return event{kind: evComplete, id: f.id, step: step}, nil
}

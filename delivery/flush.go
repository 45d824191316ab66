package delivery

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/feldera"
)

// Flush POSTs each route's lines of b, then (wait) blocks until every
// token is complete: the snapshot and the retractions, which send one
// batch at a time. Any failure leaves the position where it was.
//
// A batch may hold part of a transaction when the transaction is larger
// than BATCH_MAX_ROWS: Feldera then sees the first part before the rest.
// That weakens the source transaction's atomicity in Feldera; it is the
// price of a hard memory bound, and the primary key reconciles a replay of
// the seam. The position only ever moves to a COMMIT all of whose rows are
// complete.
func (s *Sender) Flush(ctx context.Context, targets []*decode.Target, b *Batch, wait bool) error {
	s.FlushSince.Store(time.Now().UnixNano())
	defer s.FlushSince.Store(0)
	failed := true
	defer func() { s.FlushFailed.Store(failed) }()
	if err := s.Txns.Release(ctx); err != nil {
		return err
	}
	tokens, start, err := s.post(ctx, targets, b, false)
	if err != nil {
		return err
	}
	posted := time.Now()
	if wait {
		wctx, cancel := context.WithTimeout(ctx, s.CompletionTimeout)
		defer cancel()
		slow := time.AfterFunc(CompletionLogAfter, func() {
			s.Logger.Warn("flush: waiting for Feldera to complete a batch; WAL is retained on the primary meanwhile", "batch", b.Seq, "rows", b.Total)
		})
		defer slow.Stop()
		for _, t := range tokens {
			step, err := s.Sink.WaitCompleteStep(wctx, t.Token)
			if err != nil {
				if code := feldera.ErrorCode(err); code != "" {
					s.Observer.FelderaError(code)
				}
				if wctx.Err() != nil && ctx.Err() == nil {
					return fmt.Errorf("%w: batch %d on %s not complete after %s (FELDERA_COMPLETION_TIMEOUT): nothing acknowledged", ErrFelderaUnavailable, b.Seq, t.Table, time.Since(start).Round(time.Millisecond))
				}
				if feldera.IsRestarted(err) {
					return fmt.Errorf("feldera pipeline restarted before batch %d on %s completed: nothing acknowledged; replaying from the slot: %w", b.Seq, t.Table, err)
				}
				return fmt.Errorf("wait for completion of %s: %w", t.Table, err)
			}
			if err := CheckStep(step, s.NeedStep(), func() string { return fmt.Sprintf("batch %d on %s", b.Seq, t.Table) }); err != nil {
				return err
			}
			Raise(&s.step, step)
		}
	}
	s.Batches.Add(1)
	s.Observer.Batch(b.Total, posted.Sub(start), time.Since(posted))
	failed = false
	return nil
}

// Raise sets v to x when x is larger.
func Raise(v *atomic.Uint64, x uint64) {
	for cur := v.Load(); x > cur && !v.CompareAndSwap(cur, x); cur = v.Load() {
	}
}

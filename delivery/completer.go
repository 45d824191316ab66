package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// ErrFelderaUnavailable ends a session whose batch, transaction or commit
// Feldera did not finish within FELDERA_COMPLETION_TIMEOUT or
// FELDERA_COMMIT_STALL_TIMEOUT.
var ErrFelderaUnavailable = errors.New("feldera unavailable")

// ErrNoStep is a completion without its step under the checkpoint gate:
// retrying cannot fix it.
var ErrNoStep = errors.New("completion without its step")

// CheckStep is the check every wait for completion makes of the step it
// was given: under the checkpoint gate (need) a completion without its
// step (0) cannot be acknowledged, since no checkpoint can be shown to
// cover it, and retrying cannot bring the step back. It returns nil, or
// the fatal error, which matches ErrNoStep; what names what completed
// ("batch 3 on users"), called only for the error.
func CheckStep(step uint64, need bool, what func() string) error {
	if step != 0 || !need {
		return nil
	}
	return fatal.Wrap(fmt.Errorf("%w: feldera reported %s complete without its step (GET /completion_status has no \"step\"), which at_least_once needs to know when a checkpoint covers it: upgrade Feldera", ErrNoStep, what()))
}

// CompletionLogAfter is how long a batch waits for completion before the
// wait is logged, once.
const CompletionLogAfter = 5 * time.Second

// Token is one table's completion token of a batch in flight.
type Token struct {
	Table, Token string
	done         bool
	step         uint64
}

// Flight is what a batch in flight still holds once its POSTs were
// answered.
type Flight struct {
	ID          uint64 // the ledger's id of the batch
	Seq, Rows   int
	Tokens      []*Token
	Start, Sent time.Time // the first POST's start, the last answer
	// Txn, for a batch sent inside a Feldera transaction: it cannot
	// complete before the commit, so FELDERA_COMPLETION_TIMEOUT counts
	// from the commit (the waits before it are bounded on their own).
	Txn     *TxnMark
	RowOnly bool // it carries the progress row alone, no rows
	warned  bool
}

// TxnMark is shared by the batches of one Feldera transaction: when its
// commit finished (UnixNano; 0: not yet), and the step count Feldera had
// begun then, which a checkpoint holding the commit reaches.
type TxnMark struct {
	committed atomic.Int64
	step      atomic.Uint64
}

// Committed records that the transaction's commit finished at t, once
// Feldera had begun step steps.
func (m *TxnMark) Committed(t time.Time, step uint64) {
	m.step.Store(step)
	m.committed.Store(t.UnixNano())
}

// TxnClock says whether a Feldera transaction of the session's is open
// or committing, and when the last one committed: the completer's
// timeout does not run inside one, and counts from its commit. Safe for
// concurrent use.
type TxnClock struct {
	open  atomic.Bool
	ended atomic.Int64 // unix nanos
}

// Opened records that a transaction is open.
func (c *TxnClock) Opened() { c.open.Store(true) }

// Ended records that the open transaction committed at t.
func (c *TxnClock) Ended(t time.Time) {
	c.open.Store(false)
	c.ended.Store(t.UnixNano())
}

// Open reports whether a transaction is open or committing.
func (c *TxnClock) Open() bool { return c.open.Load() }

// since is when a batch's completion wait began: its first POST, or the
// commit of its Feldera transaction; ok is false while that is still to
// come.
func (f *Flight) since() (at time.Time, ok bool) {
	if f.Txn == nil {
		return f.Start, true
	}
	if n := f.Txn.committed.Load(); n != 0 {
		return time.Unix(0, n), true
	}
	return time.Time{}, false
}

// complete reports whether every token of the batch is done. A batch
// inside a Feldera transaction whose records were all skipped (Feldera
// holds them already: Transactions.Skip) has no token, and is complete
// only once its transaction committed: before it, what Feldera holds of
// it may still be dropped or never shown, and the ledger must not
// acknowledge its COMMITs past the committed progress row.
func (f *Flight) complete() bool {
	if len(f.Tokens) == 0 && f.Txn != nil {
		return f.Txn.committed.Load() != 0
	}
	for _, t := range f.Tokens {
		if !t.done {
			return false
		}
	}
	return true
}

// Completer waits for the tokens of the batches in flight. Each round it
// asks, per table, about the oldest outstanding token and, when that one
// is complete, the newest: a token covers everything queued before it
// through the same endpoint (API.md §3), so one answer can complete every
// batch in between. Every poll either completes a token or ends its
// table's round, so a round costs a poll per table plus one per token
// completed. Between rounds that found nothing it sleeps an eighth of the
// oldest batch's wait (1 to 25 ms), and wakes at once for a new batch: the
// schedule adds little to a step of any length.
type Completer struct {
	In       <-chan *Flight // from the poster, in source order
	Poll     Poller
	Observer Observer
	Txn      *TxnClock
	Timeout  time.Duration // FELDERA_COMPLETION_TIMEOUT
	// NeedStep says a completion must carry its step: under the
	// checkpoint gate none can be acknowledged without it.
	NeedStep func() bool
	// Done sees each complete batch, at its step, before Emit reports it.
	Done   func(f *Flight, step uint64)
	Emit   func(Completion)
	Logger *slog.Logger
}

// Completion is the completer's report: batch ID complete at Step, or
// the error that ended the completer.
type Completion struct {
	ID, Step uint64
	Err      error
}

// Poller asks once whether a token's records are processed, and by which
// step (0 when unknown). *feldera.Client satisfies it.
type Poller interface {
	CompletionStep(ctx context.Context, token string) (done bool, step uint64, err error)
}

// Observer sees the batches Feldera took and its failed requests.
type Observer interface {
	// Batch is a batch Feldera took: rows, time spent POSTing, time spent
	// waiting for completion.
	Batch(rows int, post, wait time.Duration)
	// FelderaError is a failed Feldera request, by error code.
	FelderaError(code string)
}

// Run polls until ctx ends or a poll fails; the goroutine that runs it is
// started and joined by the session that owns the completer.
func (k *Completer) Run(ctx context.Context) {
	var q []*Flight
	for {
		if len(q) == 0 {
			select {
			case f := <-k.In:
				q = append(q, f)
			case <-ctx.Done():
				return
			}
		}
		for more := true; more; {
			select {
			case f := <-k.In:
				q = append(q, f)
			default:
				more = false
			}
		}
		if err := k.overdue(ctx, q[0]); err != nil {
			k.Emit(Completion{Err: err})
			return
		}
		progressed, err := k.round(ctx, q)
		if err != nil {
			k.Emit(Completion{Err: err})
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
				k.Emit(Completion{Err: err})
				return
			}
			k.Emit(ev)
		}
		clear(q[n:])
		q = q[:n]
		if len(q) == 0 || progressed {
			continue
		}
		wait := min(max(time.Since(q[0].Sent)/8, time.Millisecond), 25*time.Millisecond)
		t := time.NewTimer(wait)
		select {
		case f := <-k.In:
			q = append(q, f)
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// overdue fails the oldest batch once it waited FELDERA_COMPLETION_TIMEOUT,
// and warns once when it waited long.
func (k *Completer) overdue(ctx context.Context, f *Flight) error {
	if ctx.Err() != nil {
		return fmt.Errorf("waiting for batch %d to complete: %w", f.Seq, ctx.Err())
	}
	from, ok := f.since()
	if !ok || k.Txn.Open() {
		// Inside a Feldera transaction not yet committed, or posted
		// before one and swept into it (a transaction takes every record
		// buffered when it starts): it completes at that commit, whose
		// wait is bounded by the commit's progress.
		return nil
	}
	if end := time.Unix(0, k.Txn.ended.Load()); end.After(from) {
		from = end
	}
	waited := time.Since(from)
	if waited >= k.Timeout {
		table := ""
		for _, t := range f.Tokens {
			if !t.done {
				table = t.Table
				break
			}
		}
		return fmt.Errorf("%w: batch %d on %s not complete after %s (FELDERA_COMPLETION_TIMEOUT): nothing acknowledged", ErrFelderaUnavailable, f.Seq, table, waited.Round(time.Millisecond))
	}
	if waited >= CompletionLogAfter && !f.warned {
		f.warned = true
		k.Logger.Warn("flush: waiting for Feldera to complete a batch; WAL is retained on the primary meanwhile", "batch", f.Seq, "rows", f.Rows)
	}
	return nil
}

// round polls as described on completer and reports whether any token
// completed.
func (k *Completer) round(ctx context.Context, q []*Flight) (bool, error) {
	var order []string
	byTable := map[string][]*Token{}
	for _, f := range q {
		for _, t := range f.Tokens {
			if t.done {
				continue
			}
			if _, ok := byTable[t.Table]; !ok {
				order = append(order, t.Table)
			}
			byTable[t.Table] = append(byTable[t.Table], t)
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

func (k *Completer) poll(ctx context.Context, t *Token) (bool, uint64, error) {
	done, step, err := k.Poll.CompletionStep(ctx, t.Token)
	if err == nil {
		return done, step, nil
	}
	if code := feldera.ErrorCode(err); code != "" {
		k.Observer.FelderaError(code)
	}
	if feldera.IsRestarted(err) {
		return false, 0, fmt.Errorf("feldera pipeline restarted before a batch on %s completed: nothing acknowledged; replaying from the slot: %w", t.Table, err)
	}
	return false, 0, fmt.Errorf("wait for completion of %s: %w", t.Table, err)
}

// completed turns a complete batch into its report.
func (k *Completer) completed(f *Flight) (Completion, error) {
	var step uint64
	if len(f.Tokens) == 0 && f.Txn != nil {
		// No token: it completed at its transaction's commit.
		step = f.Txn.step.Load()
		if err := CheckStep(step, k.NeedStep(), func() string { return fmt.Sprintf("batch %d (its records skipped) at its transaction's commit", f.Seq) }); err != nil {
			return Completion{}, err
		}
	}
	for _, t := range f.Tokens {
		// Without the step no checkpoint can be shown to cover the
		// batch: never acknowledge it at completion instead.
		if err := CheckStep(t.step, k.NeedStep(), func() string { return fmt.Sprintf("batch %d on %s", f.Seq, t.Table) }); err != nil {
			return Completion{}, err
		}
		step = max(step, t.step)
	}
	k.Observer.Batch(f.Rows, f.Sent.Sub(f.Start), time.Since(f.Sent))
	k.Done(f, step)
	return Completion{ID: f.ID, Step: step}, nil
}

package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/testhook"
)

// Sink is what a Sender needs of Feldera. *feldera.Client satisfies it.
type Sink interface {
	// Ingress pushes NDJSON insert/delete lines to a table and returns a
	// completion token covering them.
	Ingester
	// WaitCompleteStep returns when the token's records are processed,
	// with the step that processed them (0 when unknown).
	WaitCompleteStep(ctx context.Context, token string) (uint64, error)
	// Query runs an ad-hoc query and calls fn per result row (a JSON object).
	Query(ctx context.Context, sql string, fn func(row json.RawMessage) error) error
}

// Sender sends batches to Feldera through the ingress fence, inside the
// Feldera transaction their plan asks for: Send for the stream's poster,
// which does not wait for completion, Flush for the snapshot and the
// retractions, which do. The Connector builds one and keeps it; the
// counters and marks it updates are the Connector's, reached through the
// pointers.
type Sender struct {
	Sink     Sink
	Fence    *Fence
	Txns     *Transactions // the Feldera transaction held open, if any
	Observer Observer
	Logger   *slog.Logger

	// Stopping is closed on a graceful stop (Run's context): a wait for
	// the fence then ends with nothing sent. Set by Run before any
	// session starts.
	Stopping <-chan struct{}
	// HardStop is what outlives a graceful stop, up to STOP_TIMEOUT
	// (Connector.stopContext).
	HardStop func(ctx context.Context) context.Context
	// CompletionTimeout is FELDERA_COMPLETION_TIMEOUT.
	CompletionTimeout time.Duration
	// NeedStep says a completion must carry its step: under the
	// checkpoint gate none can be acknowledged without it.
	NeedStep func() bool

	Batches     *atomic.Int64 // batches Feldera completed (Stats.Batches)
	FlushSince  *atomic.Int64 // unix nanos the synchronous flush started; 0 when none
	FlushFailed *atomic.Bool  // the last synchronous flush failed; cleared by a success

	// Progress is the slot's row in the progress table, nil when none is
	// used: the stream's Feldera transactions end with it (Send). Set per
	// session, while no poster runs.
	Progress *Progress
	// Rejoin says a Feldera transaction a failure leaves open is left for
	// the next session to join (AbandonTxn): set by the session while it
	// streams, when the join is harmless (connector's joinTables).
	Rejoin bool

	// step is the highest step a synchronous send (Flush: the snapshot's
	// copy, a retraction) waited for since the session began
	// (ResetStep): the session's Pipeline takes it into the Ledger's step
	// watermark, and the checkpoint that ends a snapshot covers it.
	step atomic.Uint64

	// Hooks are the tests' seams (NoFeedWait, CommitOnFailure); nil or
	// zero in production.
	Hooks *testhook.Hooks
}

// Send is the poster's work for one batch: under its transaction plan,
// start a Feldera transaction, POST, and commit once Feldera took every
// record. A failure inside a transaction commits it (there is no abort).
func (s *Sender) Send(ctx context.Context, targets []*decode.Target, b *Batch, plan TxnPlan) ([]*Token, time.Time, *TxnMark, error) {
	fail := func(err error) ([]*Token, time.Time, *TxnMark, error) {
		if plan.In {
			s.AbandonTxn()
		}
		return nil, time.Time{}, nil, err
	}
	if plan.Begin {
		if err := s.WaitFence(ctx); err != nil {
			return nil, time.Time{}, nil, err // nothing may be sent yet: not even a transaction opened
		}
		if err := s.Txns.Begin(ctx); err != nil {
			return fail(err)
		}
	} else if plan.In {
		if err := s.Txns.Room(ctx, b.Total, b.Size()); err != nil {
			return fail(err)
		}
	}
	var mark *TxnMark
	if plan.In {
		mark = s.Txns.Mark()
		if err := s.Txns.Through(b.Through); err != nil {
			return fail(err)
		}
	}
	tokens, start, err := s.post(ctx, targets, b, true)
	if err != nil {
		return fail(err)
	}
	// The progress row goes last: the transaction then holds whole
	// source transactions up to it.
	whole := plan.In && plan.End && s.Progress != nil && b.Progress != 0
	if whole {
		tok, err := s.postRow(ctx, b.Progress)
		if err != nil {
			return fail(err)
		}
		tokens = append(tokens, tok)
	}
	if plan.In {
		s.Txns.Buffered(b.Total, b.Size())
	}
	if plan.End {
		if err := s.commit(ctx, whole, b.Progress); err != nil {
			return fail(err)
		}
	}
	return tokens, start, mark, nil
}

// commit ends the Feldera transaction once it took its input; whole says
// it carries the progress row at row, which a crash before the commit
// leaves for the next process to commit (Transactions.Whole), and which
// starts a new count past the row once committed.
func (s *Sender) commit(ctx context.Context, whole bool, row pglogrepl.LSN) error {
	if err := s.absorbedUnlessHooked(ctx); err != nil {
		return err
	}
	if whole {
		if err := s.Txns.Covered(); err != nil {
			return err
		}
		if err := s.Txns.Whole(); err != nil {
			return err
		}
	}
	if err := s.Txns.Commit(ctx); err != nil {
		return err
	}
	if whole {
		return s.Txns.RowCommitted(row)
	}
	return nil
}

// postRow posts the progress row at lsn, the Feldera transaction's last
// record: the position of the last whole source transaction it holds,
// committed with it. It is posted once Feldera has fed every row before
// it: under exactly_once a restart commits the journaled part of an open
// transaction (DURABILITY.md §1.4), and a row fed before the rows it
// covers would be committed without them. A transaction that holds
// nothing yet (the row alone) has not started: only input starts it
// (felderatest/internal/circuit, transaction.go), so there is nothing to
// wait for.
func (s *Sender) postRow(ctx context.Context, lsn pglogrepl.LSN) (*Token, error) {
	if !s.Txns.Empty() {
		if err := s.absorbedUnlessHooked(ctx); err != nil {
			return nil, err
		}
	}
	return s.postProgress(ctx, lsn)
}

// post sends each route's lines of b, one request at a time, and returns
// the tokens and when the first request began (after any fence: a wait
// for the fence is not a wait for Feldera). Any failure leaves the
// position where it was. counted says the lines are the stream's, which
// are counted past the progress row (Transactions.Posting) and not sent
// when Feldera holds them (Transactions.Skip).
func (s *Sender) post(ctx context.Context, targets []*decode.Target, b *Batch, counted bool) ([]*Token, time.Time, error) {
	if err := s.WaitFence(ctx); err != nil {
		return nil, time.Time{}, err
	}
	start := time.Now()
	var tokens []*Token
	for route, buf := range b.Bufs {
		if b.Rows[route] == 0 {
			continue
		}
		table := targets[route].Dest.CanonicalName()
		if counted {
			if b.Chunked[route] {
				if err := s.Txns.Uncount(table); err != nil {
					return nil, start, err
				}
			}
			if err := s.Txns.Posting(ctx, table); err != nil {
				return nil, start, err
			}
			if s.Txns.Skipping(table) {
				if buf = skipLines(buf, s.Txns.Skip(table, bytes.Count(buf, []byte{'\n'}))); len(buf) == 0 {
					continue
				}
			}
		}
		tok, err := s.Fence.Ingress(ctx, s.Sink, table, buf, b.Rows[route])
		if err != nil {
			s.Observer.FelderaError(feldera.ErrorCode(err))
			if counted && feldera.IsParseErrors(err) {
				// Feldera counted only the records it parsed: a next
				// process skipping that many lines would skip past the
				// refused one. Uncounted, the replay sends the body again
				// and meets the refusal again.
				err = errors.Join(err, s.Txns.Uncount(table))
			}
			return nil, start, fmt.Errorf("push %d rows to %s: %w", b.Rows[route], table, err)
		}
		tokens = append(tokens, &Token{Table: table, Token: tok})
		s.Txns.Posted(table)
	}
	return tokens, start, nil
}

// absorbedUnlessHooked waits until the Feldera transaction took its input
// (Transactions.Absorbed), which the test hook NoFeedWait skips: the
// unsafe variant that shows the wait is what keeps a transaction whole,
// and accepted mode, which waits for nothing but answers.
func (s *Sender) absorbedUnlessHooked(ctx context.Context) error {
	if s.Hooks.Get().NoFeedWait || s.Txns.Accepted {
		return nil
	}
	return s.Txns.Absorbed(ctx)
}

// AbandonTxn commits, on a failure path, the Feldera transaction a batch
// left open, bounded by STOP_TIMEOUT (Transactions.Abandon). When the
// stream's next session can join it (Rejoin) it leaves it open instead:
// a commit would show a prefix of the flush, and the next session joins
// it (Transactions.Settle), replays into it, and commits it whole. A
// process that exits leaves none open (connector.exitTxn).
func (s *Sender) AbandonTxn() {
	if s.Rejoin && s.Txns.ID() != 0 && !s.Hooks.Get().CommitOnFailure {
		s.Logger.Warn("flush: leaving the Feldera transaction open after a failure: the next session joins it, and commits it once the replay completes it", "transaction_id", s.Txns.ID())
		return
	}
	s.Txns.Abandon(s.HardStop(context.Background()), "a send failed inside it")
}

// WaitFence blocks while an unanswered ingress request may still be queued
// by Feldera; a graceful stop ends the wait with nothing sent.
func (s *Sender) WaitFence(ctx context.Context) error {
	return s.Fence.Wait(ctx, s.Stopping)
}

// Query runs an ad-hoc query once the ingress fence allows: a read that
// decides a retraction must not run while a late request of a dead
// process (or of this one) can still land after it.
func (s *Sender) Query(ctx context.Context, sql string, fn func(row json.RawMessage) error) error {
	if err := s.WaitFence(ctx); err != nil {
		return err
	}
	return s.Sink.Query(ctx, sql, fn)
}

// skipLines is body without its first n lines.
func skipLines(body []byte, n int) []byte {
	for ; n > 0 && len(body) > 0; n-- {
		i := bytes.IndexByte(body, '\n')
		if i < 0 {
			return nil
		}
		body = body[i+1:]
	}
	return body
}

// SyncStep is the highest step a synchronous send waited for since the
// session began.
func (s *Sender) SyncStep() uint64 { return s.step.Load() }

// RaiseSyncStep raises it: the steps Feldera had begun when the progress
// row was read.
func (s *Sender) RaiseSyncStep(step uint64) { Raise(&s.step, step) }

// ResetSyncStep starts a session: steps of an earlier one may belong to
// a state Feldera rolled back.
func (s *Sender) ResetSyncStep() { s.step.Store(0) }

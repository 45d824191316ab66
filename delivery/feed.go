package delivery

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// What the Pipeline feeds the Ledger, and what it reads of it: every
// input of the acknowledged position passes through here, from the
// stream (a COMMIT, a keepalive), from the Pipeline's own goroutines (a
// POST answered, a completion, a retraction's steps) and from the
// watcher (a checkpoint).

// Apply is the loop's side of an event: it reports whether the
// acknowledged position moved. A failure is returned as it came: it ends
// the session, which drops everything in flight, and the next one
// replays it from the slot. A completion that lost its step is fatal:
// retrying cannot bring the step back.
func (p *Pipeline) Apply(ev Event) (bool, error) {
	if ev.Err != nil {
		p.Sender.FlushFailed.Store(true)
		if ev.Kind == Completed && errors.Is(ev.Err, ErrNoStep) {
			return false, fatal.Wrap(ev.Err)
		}
		return false, ev.Err
	}
	moved := false
	now := time.Now()
	switch ev.Kind {
	case Posted:
		p.posting = false
		ev.Batch.Shrink(64 << 20)
		p.spare = ev.Batch
		if ev.AckNow {
			p.landed(ev.ID)
			moved = p.led.Accepted(ev.ID, now)
		}
	case Completed:
		p.landed(ev.ID)
		moved = p.led.Completed(ev.ID, ev.Step, now)
		p.Sender.FlushFailed.Store(false)
	case Retracted:
		p.retracting = false
		p.led.Stepped(ev.Step)
		p.Sender.FlushFailed.Store(false)
	}
	p.flushSince()
	return moved, nil
}

// Retract runs job, a retraction (a TRUNCATE's), on a goroutine of its
// own while nothing else is sent; its steps reach the gate through the
// Ledger's step watermark, since it is no batch of the frontier. The
// Retracted event reports its end.
func (p *Pipeline) Retract(job func(ctx context.Context) (step uint64, err error)) {
	p.retracting = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		step, err := job(p.ctx)
		p.Emit(Event{Kind: Retracted, Step: step, Err: err})
	}()
}

// Keepalive applies a keepalive whose WAL end is walEnd: with nothing
// open, buffered or in flight, every byte below it was read, so an idle
// slot releases WAL. It reports whether the position moved.
func (p *Pipeline) Keepalive(walEnd pglogrepl.LSN, now time.Time) bool {
	p.walEnd = max(p.walEnd, walEnd)
	p.join.Keepalive(walEnd, p.open)
	return p.led.Keepalive(walEnd, p.quiet(), now)
}

// QuietEnd applies, with the progress row, the last keepalive's WAL end
// once the session is quiet: one that came while a batch was in flight
// (the row alone, most often) moved nothing, and an idle server sends the
// next only when the heartbeat asks, half a replication timeout later.
// Every message sent before it has been read, so once nothing is open,
// buffered or in flight, all below it is handled.
func (p *Pipeline) QuietEnd(now time.Time) bool {
	if !p.keepsRows || p.walEnd <= p.led.Acked() || !p.quiet() {
		return false
	}
	return p.led.Keepalive(p.walEnd, true, now)
}

// SkipBelow starts the session's skip at the progress row's position at
// (0: none) and, with the row (unless keep is false, a test's unsafe
// variant), keeps the slot from passing it; it reports whether it does.
func (p *Pipeline) SkipBelow(at pglogrepl.LSN, keep bool) bool {
	p.skip.Below = at
	p.keepsRows = p.Sender.Progress != nil && keep
	if p.keepsRows {
		p.led.KeepRows(at)
	}
	return p.keepsRows
}

// KeepsRows reports whether the slot keeps behind the progress row.
func (p *Pipeline) KeepsRows() bool { return p.keepsRows }

// Emptied applies a filling batch that a TRUNCATE emptied, or a stop
// found empty: the COMMITs it carried need nothing more.
func (p *Pipeline) Emptied(now time.Time) bool { return p.led.Emptied(now) }

// Stepped raises the step watermark: steps a synchronous send (a
// snapshot, a retraction at startup) or the progress row waited for.
func (p *Pipeline) Stepped(step uint64) { p.led.Stepped(step) }

// Checkpointed applies the newest checkpoint the watcher saw (its steps,
// and when the watcher saw it); it reports whether the position moved. A
// checkpoint that covers more than the last one is first recorded
// (record): a restart must restore it, or a later one, before anything it
// covers is acknowledged.
func (p *Pipeline) Checkpointed(steps uint64, seenAt time.Time, record func() error) (bool, error) {
	if !p.led.Queued() {
		return false, nil
	}
	moved := false
	if p.led.Confirms() {
		moved = p.led.ConfirmedAt(seenAt)
	}
	if steps > p.led.Covered() {
		if err := record(); err != nil {
			return false, err
		}
	}
	return p.led.Checkpointed(steps) || moved, nil
}

// AckAtCompletion moves the gate back to completion (exactly_once, once
// Feldera journals its input again).
func (p *Pipeline) AckAtCompletion() { p.led.AckAtCompletion() }

// Acked is the acknowledged position.
func (p *Pipeline) Acked() pglogrepl.LSN { return p.led.Acked() }

// Step is the step watermark.
func (p *Pipeline) Step() uint64 { return p.led.Step() }

// CompletedTo is the end of the longest completed prefix (0: none).
func (p *Pipeline) CompletedTo() pglogrepl.LSN { return p.led.CompletedTo() }

// Queued reports whether completed work waits for a checkpoint.
func (p *Pipeline) Queued() bool { return p.led.Queued() }

// Waiting is since when completed work waits for a checkpoint.
func (p *Pipeline) Waiting() (time.Time, bool) { return p.led.Waiting() }

// WaitingWAL is the WAL that completed work waiting for a checkpoint
// holds, in bytes.
func (p *Pipeline) WaitingWAL() uint64 { return p.led.WaitingWAL() }

// HighestPending is the highest step a checkpoint must cover for
// everything completed to be durable.
func (p *Pipeline) HighestPending() uint64 { return p.led.HighestPending() }

// Busy reports whether a POST, a batch in flight or a retraction runs.
func (p *Pipeline) Busy() bool { return p.posting || p.retracting || p.led.InFlight() > 0 }

// Posting reports whether a POST runs.
func (p *Pipeline) Posting() bool { return p.posting }

// quiet reports whether nothing is open, buffered or in flight: the
// Ledger's keepalive rule.
func (p *Pipeline) quiet() bool { return !p.open && p.filling.Total == 0 && !p.Busy() }

// Pending reports whether anything read is not yet acknowledged.
func (p *Pipeline) Pending() bool { return !p.quiet() || p.led.Pending() }

// OpenRows reports whether the filling batch holds rows of the open
// source transaction.
func (p *Pipeline) OpenRows() bool { return p.openRows }

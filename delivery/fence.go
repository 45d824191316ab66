package delivery

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/state"
)

// Ingester is what the fence sends through: one ingress request to a
// table, answered with a completion token. *feldera.Client satisfies it.
type Ingester interface {
	Ingress(ctx context.Context, table string, body []byte) (string, error)
}

// Fence keeps a late copy of old rows from landing after newer ones. An
// ingress request that got no clear answer may still be queued by Feldera
// (its manager forwards ingress with a 30 s timeout), so nothing newer is
// sent until window has passed after its last byte. The fence file carries
// the marks across processes. Safe for concurrent use: any goroutine may
// send through it or wait on it, one at a time per request.
type Fence struct {
	window time.Duration
	logger *slog.Logger
	until  atomic.Int64     // unix nanos: send nothing before
	file   *state.FenceFile // per-request marks for the next process; nil without a state file
	// Taken counts what each table's ingress endpoints took, from the
	// answers the fence sees (Transactions reads and uses it).
	Taken    Taken
	leftPast *state.PastRow // the previous process's count past the progress row
}

// NewFence returns an open fence that holds nothing, kept in memory only
// until Open gives it a file.
func NewFence(window time.Duration, logger *slog.Logger) *Fence {
	return &Fence{window: window, logger: logger}
}

// Open carries the ingress fence across processes. Every ingress request
// is marked outstanding in the fence file before it is sent and cleared
// once an answer proves Feldera will not apply it later. A previous
// process that died (the file still marked running) with a request
// outstanding may have left it for Feldera to apply after anything this
// process sends: this one then waits until that request's last byte plus
// the window. One that died with nothing outstanding (every named crash
// point) needs no wait. One that returned left its fence deadline in the
// file. Open returns the Feldera transaction the previous process left
// open, if any, which the caller settles before sending anything.
func (f *Fence) Open(stateFile string) (*state.OpenTransaction, error) {
	if stateFile == "" {
		return nil, nil
	}
	if removed, err := state.RemoveStale(stateFile); err != nil {
		return nil, err
	} else if len(removed) > 0 {
		f.logger.Info("startup: removed temporary files of an interrupted state write", "files", strings.Join(removed, ","))
	}
	path := state.FencePath(stateFile)
	prev, err := state.LoadFence(path)
	switch {
	case errors.Is(err, state.ErrNotExist):
	case err != nil:
		f.logger.Warn("fence: unreadable fence file: fencing ingress as after a crash with a request outstanding", "err", err)
		f.Extend(time.Now().Add(f.window))
	default:
		f.inherit(prev)
	}
	ff, err := state.OpenFence(path, f.Deadline())
	if err != nil {
		return nil, err
	}
	f.file = ff
	if prev == nil {
		return nil, nil
	}
	if prev.Past != nil {
		// Kept for the next process too, until a session replaces it.
		f.leftPast = prev.Past
		if err := ff.Past(prev.Past); err != nil {
			return nil, err
		}
	}
	if prev.Partial != nil {
		if err := ff.PartialCommitted(prev.Partial); err != nil {
			return nil, err
		}
	}
	return prev.Transaction, nil
}

// LeftPast is what the previous process's fence file counted past the
// progress row (nil: nothing).
func (f *Fence) LeftPast() *state.PastRow { return f.leftPast }

// PartialCommitted records the last Feldera transaction committed with
// part of a source transaction in it (state.PartialCommit).
func (f *Fence) PartialCommitted(p *state.PartialCommit) error {
	if f.file == nil {
		return nil
	}
	return f.file.PartialCommitted(p)
}

// Past records what Feldera holds past the progress row.
func (f *Fence) Past(p *state.PastRow) error {
	if f.file == nil {
		return nil
	}
	return f.file.Past(p)
}

// inherit applies what the previous process's fence file says.
func (f *Fence) inherit(prev *state.Fence) {
	now := time.Now()
	switch {
	case prev.Running && prev.Outstanding != nil:
		// The request's last byte left before the process died, so before
		// now; if it never got that far, its bytes stopped at the death.
		from := prev.Outstanding.Wrote
		if from.IsZero() || from.After(now) {
			from = now
		}
		until := from.Add(f.window)
		f.logger.Warn("fence: the previous pgfeldera process did not stop cleanly and had an ingress request outstanding that Feldera may still apply; "+
			"nothing is sent until it can no longer land (FELDERA_INGRESS_FENCE after its last byte)",
			"previous_pid", prev.PID, "table", prev.Outstanding.Table, "rows", prev.Outstanding.Rows, "since", prev.Outstanding.Since.UTC().Format(time.RFC3339Nano),
			"last_byte", FormatTime(prev.Outstanding.Wrote), "cause", prev.Outstanding.Cause, "wait", time.Until(until).Round(time.Millisecond))
		f.Extend(until)
	case prev.Running:
		f.logger.Info("startup: the previous pgfeldera process did not stop cleanly; it had no ingress request outstanding, so nothing is fenced", "previous_pid", prev.PID)
	}
	if time.Until(prev.Until) > 0 {
		f.logger.Warn("fence: the previous process left an ingress request without a clear answer; nothing is sent until it can no longer land",
			"until", prev.Until.UTC().Format(time.RFC3339), "wait", time.Until(prev.Until).Round(time.Millisecond))
		f.Extend(prev.Until)
	}
}

// FormatTime formats a recorded time for a log line, "unknown" when zero.
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Close records that this process stopped, with any fence deadline still
// ahead, for the next one.
func (f *Fence) Close() {
	if f.file == nil {
		return
	}
	until := f.Deadline()
	if time.Until(until) <= 0 {
		until = time.Time{}
	}
	if err := f.file.Close(until); err != nil {
		f.logger.Error("fence: could not record the stop; the next start fences as after a crash", "err", err)
	}
}

// Transaction records the Feldera transaction this process holds open
// (nil: none), so that a crash leaves a trace the next process settles.
func (f *Fence) Transaction(t *state.OpenTransaction) error {
	if f.file == nil {
		return nil
	}
	return f.file.Transaction(t)
}

// Ingress sends one ingress request between the fence marks: outstanding
// before its first byte, the time of its last byte, cleared by an answer
// that settles it. An answer that does not (IsOutcomeUnknown) fences
// ingress in memory from the last byte, and the mark stays for the next
// process should this one die.
func (f *Fence) Ingress(ctx context.Context, in Ingester, table string, body []byte, rows int) (string, error) {
	var wrote atomic.Int64
	ff := f.file
	if ff != nil {
		if err := ff.Outstanding(table, rows, time.Now()); err != nil {
			return "", err // never send what a crash could leave unfenced
		}
	}
	ctx = feldera.WithBodyWritten(ctx, func(at time.Time) {
		wrote.Store(at.UnixNano())
		if ff != nil {
			if err := ff.Wrote(at); err != nil {
				f.logger.Warn("fence: could not record the end of a request; a crash now would fence from the restart", "err", err)
			}
		}
	})
	tok, err := in.Ingress(ctx, table, body)
	if err != nil {
		f.Taken.failed(table)
	} else {
		f.Taken.answered(table, body)
	}
	if err != nil && feldera.IsOutcomeUnknown(err) {
		// Feldera may still queue this request later, after anything
		// newer: fence before sending again.
		from := time.Now()
		if w := wrote.Load(); w != 0 {
			from = time.Unix(0, w)
		}
		f.Extend(from.Add(f.window))
		if ff != nil {
			if e := ff.Unclear(feldera.ErrorCode(err)); e != nil {
				f.logger.Warn("fence: could not record an unclear answer", "err", e)
			}
		}
		return "", err
	}
	if ff != nil {
		if e := ff.Answered(); e != nil {
			// The mark stays: a crash would fence when it need not. Safe.
			f.logger.Warn("fence: could not clear the outstanding-request mark", "err", e)
		}
	}
	return tok, err
}

// Wait blocks while an unanswered ingress request may still be queued by
// Feldera. stopping is closed on a graceful stop, which does not wait out
// the fence: nothing is sent or acknowledged, the slot replays it, and the
// fence file carries the deadline to the next process.
func (f *Fence) Wait(ctx context.Context, stopping <-chan struct{}) error {
	wait := time.Until(f.Deadline())
	if wait <= 0 {
		return nil
	}
	f.logger.Warn("flush: an ingress request got no clear answer and may still be applied; waiting before sending anything newer", "wait", wait.Round(time.Millisecond))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-stopping:
		return errors.New("stopping while the ingress fence holds: nothing sent")
	case <-t.C:
		return nil
	}
}

// Extend moves the fence deadline later, never earlier.
func (f *Fence) Extend(until time.Time) {
	n := until.UnixNano()
	for {
		cur := f.until.Load()
		if n <= cur || f.until.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Remaining is how long ingress stays fenced (0 when it is not).
func (f *Fence) Remaining() time.Duration {
	return max(time.Until(f.Deadline()), 0)
}

// Deadline is when the fence lifts (zero: it holds nothing).
func (f *Fence) Deadline() time.Time {
	n := f.until.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

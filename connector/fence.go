package connector

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/state"
)

// openFence carries the ingress fence across processes. Every ingress
// request is marked outstanding in the fence file before it is sent and
// cleared once an answer proves Feldera will not apply it later. A
// previous process that died (the file still marked running) with a
// request outstanding may have left it for Feldera to apply after anything
// this process sends: this one then waits until that request's last byte
// plus FELDERA_INGRESS_FENCE. One that died with nothing outstanding (every
// named crash point) needs no wait. One that returned left its fence
// deadline in the file.
func (c *Connector) openFence() error {
	if c.cfg.StateFile == "" {
		return nil
	}
	if removed, err := state.RemoveStale(c.cfg.StateFile); err != nil {
		return err
	} else if len(removed) > 0 {
		c.logger.Info("startup: removed temporary files of an interrupted state write", "files", strings.Join(removed, ","))
	}
	path := state.FencePath(c.cfg.StateFile)
	f, err := state.LoadFence(path)
	now := time.Now()
	switch {
	case errors.Is(err, state.ErrNotExist):
	case err != nil:
		c.logger.Warn("fence: unreadable fence file: fencing ingress as after a crash with a request outstanding", "err", err)
		c.extendFence(now.Add(c.cfg.IngressFence))
	case f.Running && f.Outstanding != nil:
		// The request's last byte left before the process died, so before
		// now; if it never got that far, its bytes stopped at the death.
		from := f.Outstanding.Wrote
		if from.IsZero() || from.After(now) {
			from = now
		}
		until := from.Add(c.cfg.IngressFence)
		c.logger.Warn("fence: the previous pgfeldera process did not stop cleanly and had an ingress request outstanding that Feldera may still apply; "+
			"nothing is sent until it can no longer land (FELDERA_INGRESS_FENCE after its last byte)",
			"previous_pid", f.PID, "table", f.Outstanding.Table, "rows", f.Outstanding.Rows, "since", f.Outstanding.Since.UTC().Format(time.RFC3339Nano),
			"last_byte", formatTime(f.Outstanding.Wrote), "cause", f.Outstanding.Cause, "wait", time.Until(until).Round(time.Millisecond))
		c.extendFence(until)
	case f.Running:
		c.logger.Info("startup: the previous pgfeldera process did not stop cleanly; it had no ingress request outstanding, so nothing is fenced", "previous_pid", f.PID)
	}
	if f != nil && time.Until(f.Until) > 0 {
		c.logger.Warn("fence: the previous process left an ingress request without a clear answer; nothing is sent until it can no longer land",
			"until", f.Until.UTC().Format(time.RFC3339), "wait", time.Until(f.Until).Round(time.Millisecond))
		c.extendFence(f.Until)
	}
	ff, err := state.OpenFence(path, c.fenceDeadline())
	if err != nil {
		return err
	}
	c.fenceFile = ff
	if f != nil && f.Transaction != nil && !c.test.noSettle {
		// Committed by the first session (settleTransaction), on the
		// same pipeline process only: a restart dropped it.
		c.txn = &felderaTxn{id: f.Transaction.ID, incarnation: f.Transaction.Incarnation}
		c.logger.Warn("startup: the previous pgfeldera process left a Feldera transaction open; committing it before anything is sent",
			"transaction_id", f.Transaction.ID, "since", formatTime(f.Transaction.Since))
		if err := ff.Transaction(f.Transaction); err != nil {
			return err
		}
	}
	return nil
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// closeFence records that this process stopped, with any fence deadline
// still ahead, for the next one.
func (c *Connector) closeFence() {
	if c.fenceFile == nil {
		return
	}
	until := c.fenceDeadline()
	if time.Until(until) <= 0 {
		until = time.Time{}
	}
	if err := c.fenceFile.Close(until); err != nil {
		c.logger.Error("fence: could not record the stop; the next start fences as after a crash", "err", err)
	}
}

// ingress sends one ingress request between the fence marks: outstanding
// before its first byte, the time of its last byte, cleared by an answer
// that settles it. An answer that does not (IsOutcomeUnknown) fences
// ingress in memory from the last byte, and the mark stays for the next
// process should this one die.
func (c *Connector) ingress(ctx context.Context, table string, body []byte, rows int) (string, error) {
	var wrote atomic.Int64
	ff := c.fenceFile
	if ff != nil {
		if err := ff.Outstanding(table, rows, time.Now()); err != nil {
			return "", err // never send what a crash could leave unfenced
		}
	}
	ctx = feldera.WithBodyWritten(ctx, func(at time.Time) {
		wrote.Store(at.UnixNano())
		if ff != nil {
			if err := ff.Wrote(at); err != nil {
				c.logger.Warn("fence: could not record the end of a request; a crash now would fence from the restart", "err", err)
			}
		}
	})
	tok, err := c.sink.Ingress(ctx, table, body)
	if err != nil && feldera.IsOutcomeUnknown(err) {
		// Feldera may still queue this request later, after anything
		// newer: fence before sending again.
		from := time.Now()
		if w := wrote.Load(); w != 0 {
			from = time.Unix(0, w)
		}
		c.extendFence(from.Add(c.cfg.IngressFence))
		if ff != nil {
			if e := ff.Unclear(feldera.ErrorCode(err)); e != nil {
				c.logger.Warn("fence: could not record an unclear answer", "err", e)
			}
		}
		return "", err
	}
	if ff != nil {
		if e := ff.Answered(); e != nil {
			// The mark stays: a crash would fence when it need not. Safe.
			c.logger.Warn("fence: could not clear the outstanding-request mark", "err", e)
		}
	}
	return tok, err
}

// query runs an ad-hoc query once the ingress fence allows: a read that
// decides a retraction must not run while a late request of a dead
// process (or of this one) can still land after it.
func (c *Connector) query(ctx context.Context, sql string, fn func(row json.RawMessage) error) error {
	if err := c.waitFence(ctx); err != nil {
		return err
	}
	return c.sink.Query(ctx, sql, fn)
}

// extendFence moves the fence deadline later, never earlier.
func (c *Connector) extendFence(until time.Time) {
	n := until.UnixNano()
	for {
		cur := c.fenceUntil.Load()
		if n <= cur || c.fenceUntil.CompareAndSwap(cur, n) {
			return
		}
	}
}

// IngressFenced is how long ingress stays fenced (0 when it is not): after
// a request without a clear answer, nothing newer is sent until Feldera can
// no longer apply it. Safe for concurrent use.
func (c *Connector) IngressFenced() time.Duration {
	return max(time.Until(c.fenceDeadline()), 0)
}

func (c *Connector) fenceDeadline() time.Time {
	n := c.fenceUntil.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

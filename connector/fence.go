package connector

import (
	"errors"
	"os"
	"strings"
	"time"

	"github.com/pgfeldera/pgfeldera/state"
)

// openFence carries the ingress fence across processes. A previous
// process that returned left its fence deadline in the fence file; one
// that died left the file marked running, and may have had an ingress
// request outstanding that Feldera can still apply after anything this
// process sends, so this one waits a whole FELDERA_INGRESS_FENCE before
// its first request. Then the file is marked running for this process.
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
	switch {
	case errors.Is(err, state.ErrNotExist):
	case err != nil:
		c.logger.Warn("fence: unreadable fence file: fencing ingress as after a crash", "err", err)
		c.extendFence(time.Now().Add(c.cfg.IngressFence))
	case f.Running:
		c.logger.Warn("fence: the previous pgfeldera process did not stop cleanly and may have left an ingress request that Feldera can still apply; "+
			"nothing is sent until it can no longer land (FELDERA_INGRESS_FENCE)", "previous_pid", f.PID, "wait", c.cfg.IngressFence)
		c.extendFence(time.Now().Add(c.cfg.IngressFence))
	case time.Until(f.Until) > 0:
		c.logger.Warn("fence: the previous process left an ingress request without a clear answer; nothing is sent until it can no longer land",
			"until", f.Until.UTC().Format(time.RFC3339), "wait", time.Until(f.Until).Round(time.Millisecond))
		c.extendFence(f.Until)
	}
	return state.SaveFence(path, &state.Fence{Running: true, PID: os.Getpid(), Until: c.fenceDeadline()})
}

// closeFence records that this process stopped, with any fence deadline
// still ahead, for the next one.
func (c *Connector) closeFence() {
	if c.cfg.StateFile == "" {
		return
	}
	until := c.fenceDeadline()
	if time.Until(until) <= 0 {
		until = time.Time{}
	}
	if err := state.SaveFence(state.FencePath(c.cfg.StateFile), &state.Fence{Until: until}); err != nil {
		c.logger.Error("fence: could not record the stop; the next start fences as after a crash", "err", err)
	}
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

package connector

import (
	"time"

	"github.com/pgfeldera/pgfeldera/delivery"
)

// openFence opens the ingress fence's file (delivery.Fence.Open). A
// Feldera transaction the previous process left open is committed by the
// first session (Transactions.Settle) before anything is sent, on the same pipeline
// process only: a restart dropped it.
func (c *Connector) openFence() error {
	left, err := c.fence.Open(c.cfg.StateFile)
	if err != nil {
		return err
	}
	if !c.test.NoCount {
		c.txns.LeftPast(c.fence.LeftPast()) // what Feldera holds past the progress row, counted
	}
	if left == nil || c.test.NoSettle {
		return nil
	}
	c.txns.LeftOpen(*left)
	// What the dead process POSTed into it counts as sent: after a
	// failover, a fork before it means the transaction holds rows the
	// new primary never had, and the start resnapshots instead of
	// joining them into Feldera's state (failover.Checker.Diverged).
	c.sentHigh = max(c.sentHigh, c.txns.LeftThrough())
	c.logger.Warn("startup: the previous pgfeldera process left a Feldera transaction open; settling it before anything is sent (committing it, or with the progress table joining it)",
		"transaction_id", left.ID, "since", delivery.FormatTime(left.Since))
	return c.fence.Transaction(left)
}

// IngressFenced is how long ingress stays fenced (0 when it is not): after
// a request without a clear answer, nothing newer is sent until Feldera can
// no longer apply it. Safe for concurrent use.
func (c *Connector) IngressFenced() time.Duration {
	return c.fence.Remaining()
}

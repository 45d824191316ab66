package connector

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pgfeldera/pgfeldera/delivery"
)

// openFence opens the ingress fence's file (delivery.Fence.Open). A
// Feldera transaction the previous process left open is committed by the
// first session (Transactions.Settle) before anything is sent, on the same pipeline
// process only: a restart dropped it.
func (c *Connector) openFence() error {
	left, err := c.fence.Open(c.cfg.StateFile)
	if err != nil || left == nil || c.test.noSettle {
		return err
	}
	c.txns.LeftOpen(left.ID, left.Incarnation)
	c.logger.Warn("startup: the previous pgfeldera process left a Feldera transaction open; committing it before anything is sent",
		"transaction_id", left.ID, "since", delivery.FormatTime(left.Since))
	return c.fence.Transaction(left)
}

// waitFence blocks while an unanswered ingress request may still be queued
// by Feldera; a graceful stop ends the wait with nothing sent.
func (c *Connector) waitFence(ctx context.Context) error {
	return c.fence.Wait(ctx, c.stopping)
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

// IngressFenced is how long ingress stays fenced (0 when it is not): after
// a request without a clear answer, nothing newer is sent until Feldera can
// no longer apply it. Safe for concurrent use.
func (c *Connector) IngressFenced() time.Duration {
	return c.fence.Remaining()
}

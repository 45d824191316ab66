package replconn

import (
	"context"
	"time"
)

// RecvCtx reuses one deadline context across receives while the deadline
// and the base context stay the same, instead of one per message.
type RecvCtx struct {
	ctx      context.Context
	cancel   context.CancelFunc
	base     context.Context
	deadline time.Time
}

// Get is the context a receive uses: one that ends at deadline or with
// base.
func (r *RecvCtx) Get(base context.Context, deadline time.Time) context.Context {
	if r.ctx == nil || r.ctx.Err() != nil || r.base != base || !deadline.Equal(r.deadline) {
		r.Release()
		r.ctx, r.cancel = context.WithDeadline(base, deadline)
		r.base, r.deadline = base, deadline
	}
	return r.ctx
}

// Release cancels the context Get gave.
func (r *RecvCtx) Release() {
	if r.cancel != nil {
		r.cancel()
	}
	r.ctx, r.cancel = nil, nil
}

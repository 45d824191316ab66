package metrics

import "context"

// ReadSlot reads the slot once, as the poller in Serve does.
func (m *Metrics) ReadSlot(ctx context.Context) { m.readSlot(ctx) }

package connector

import "github.com/pgfeldera/pgfeldera/delivery"

// bounds are the batches' bounds (BATCH_MAX_ROWS, BATCH_MAX_BYTES).
func (c *Connector) bounds() delivery.Bounds {
	return delivery.Bounds{Rows: c.cfg.BatchMaxRows, Bytes: c.cfg.BatchMaxBytes}
}

package connector

import (
	"sync/atomic"

	"github.com/pgfeldera/pgfeldera/incremental"
)

// incConfig is what the session's incremental snapshots need of the
// Connector (incremental.Config).
func (c *Connector) incConfig() incremental.Config {
	return incremental.Config{
		DSN: c.cfg.DSN, Slot: c.cfg.Slot, StateFile: c.cfg.StateFile, Never: c.cfg.SnapshotMode == SnapshotNever,
		ChunkRows: c.cfg.SnapshotChunkRows, Parallelism: c.cfg.SnapshotParallelism, MaxBytes: c.cfg.BatchMaxBytes,
		Logger: c.logger, Spool: c.loader.SpoolQuery,
		SnapshotRows: &c.stats.SnapshotRows, Retracted: &c.stats.Retracted,
		Copied:   func(route int) *atomic.Int64 { return &c.tableStats[route].Copied },
		Progress: func(route int) *incremental.Progress { return &c.tableStats[route].Progress },
		Hooks:    &c.test,
	}
}

package connector

import (
	"sync/atomic"

	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/incsession"
)

// incConfig is what the session's incremental snapshots need of the
// Connector (incsession.Config).
func (c *Connector) incConfig() incsession.Config {
	return incsession.Config{
		DSN: c.cfg.DSN, Slot: c.cfg.Slot, StateFile: c.cfg.StateFile, Never: c.cfg.SnapshotMode == SnapshotNever,
		ChunkRows: c.cfg.SnapshotChunkRows, Parallelism: c.cfg.SnapshotParallelism, MaxBytes: c.cfg.BatchMaxBytes,
		Logger: c.logger, Spool: c.loader.SpoolQuery,
		SnapshotRows: &c.stats.SnapshotRows, Retracted: &c.stats.Retracted,
		Copied:   func(route int) *atomic.Int64 { return &c.tableStats[route].Copied },
		Progress: func(route int) *incremental.Progress { return &c.tableStats[route].Progress },
		Hooks:    incsession.Hooks{Worker: c.test.worker, NoWindow: c.test.noWindow, IgnoreShape: c.test.ignoreShape},
	}
}

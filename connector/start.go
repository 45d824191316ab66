package connector

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/setup"
)

// starter is the session's start (package startup), with what it reads
// of the Connector now.
func (c *Connector) starter() *Starter {
	return &Starter{
		DSN: c.cfg.DSN, Slot: c.cfg.Slot, Publication: c.cfg.Publication, StateFile: c.cfg.StateFile,
		Tables: c.cfg.Tables, SlotFailover: c.cfg.SlotFailover,
		Never: c.cfg.SnapshotMode == SnapshotNever, Incremental: c.cfg.SnapshotMode == SnapshotIncremental,
		Inconsistent: c.cfg.SnapshotMode == SnapshotInconsistent, ChunkRows: c.cfg.SnapshotChunkRows,
		First: c.stats.Sessions.Load() == 0, // serve counts the session once it streams
		Acked: c.acked, SentHigh: c.sentHigh, SilentEnd: c.silentEnd,
		Loader: c.loader, Watcher: c.newWatcher, CP: &c.cp,
		Snapshotting: &c.health.snapshotting, Progress: &c.health.progress,
		PublishGate: func(g delivery.Gate) { c.gate.Store(int32(g)) },
		Logger:      c.logger,
		Hooks:       &c.test,
	}
}

// begin decides where the session starts (Starter.Begin) and
// applies what it found: the server, the connection for chunks an
// incremental start opened, and the slot's confirmed position, from
// which the session acknowledges.
func (c *Connector) begin(ctx context.Context, st *Starter, p *setup.Plan, conn *pgconn.PgConn) error {
	res, err := st.Begin(ctx, p, conn)
	c.srv = res.Server
	c.spare.Keep(res.Spare)
	if err != nil {
		return err
	}
	if res.Confirmed != c.acked {
		if c.acked != 0 {
			c.logger.Info("session: the slot's confirmed_flush_lsn differs from this process's last acknowledgement; starting from the slot's", "confirmed_flush_lsn", res.Confirmed, "last_acked", c.acked)
		}
		c.acked = res.Confirmed
		c.stats.Acked.Store(uint64(res.Confirmed))
	}
	return nil
}

// startReplication starts streaming on conn; Postgres's answer is awaited
// no longer than the liveness timeout.
func (c *Connector) startReplication(ctx context.Context, st *Starter, p *setup.Plan, conn *pgconn.PgConn) error {
	c.silentEnd = false // st.SilentEnd: StartReplication ends the walsender it left
	st.ReplicationTimeout = c.replicationTimeout(p)
	if c.test.BeforeStart != nil {
		c.test.BeforeStart()
	}
	return st.StartReplication(ctx, conn)
}

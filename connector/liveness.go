package connector

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/setup"
)

// SilentError ends a session whose replication connection said nothing
// for its timeout (replconn.SilentError).
type SilentError = replconn.SilentError

// endSilentWalsender ends the walsender that still holds the slot after a
// session ended silent: the server may not notice the dead connection
// before its own wal_sender_timeout (or the kernel's retransmissions), and
// the slot stays active, refusing this session, until it does. A role may
// end its own backends (pg_terminate_backend).
func (c *Connector) endSilentWalsender(ctx context.Context, conn *pgconn.PgConn) error {
	pid, err := replconn.TerminateWalsender(ctx, conn, c.cfg.Slot)
	if err != nil {
		return fmt.Errorf("end the walsender that held slot %s before the connection went silent: %w", c.cfg.Slot, err)
	}
	if pid != "" {
		c.logger.Warn("session: ended the walsender that still held the slot after the replication connection went silent", "pid", pid)
	}
	return nil
}

// replicationTimeout is the session's liveness timeout (0: none, a test
// hook's unsafe variant).
func (c *Connector) replicationTimeout(p *setup.Plan) time.Duration {
	if c.test.noHeartbeat {
		return 0
	}
	return replconn.Timeout(c.cfg.ReplicationTimeout, p.WALTimeout)
}

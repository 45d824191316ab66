package connector

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/setup"
)

// liveness is the replication stream's heartbeat rule, the one
// PostgreSQL's walreceiver keeps with wal_receiver_timeout: the stream is
// alive while the server speaks. Half the timeout after the last message,
// a status update asks for a reply (a keepalive comes back at once from a
// live walsender, even an idle one); with nothing by the timeout, the
// connection is dead (a NAT or load balancer that dropped the flow, an
// address that no longer answers, a frozen server), and the session ends
// instead of writing status updates into it until the kernel gives up
// (about 15 minutes of retransmissions).
//
// It counts only time spent listening: a wait that reads nothing (the
// outbox full, a retraction draining) restarts it when it ends.
type liveness struct {
	timeout time.Duration
	heard   time.Time // the last message, or when listening began again
	asked   bool      // a reply was asked for since
}

// heardAt records a message, or the start of listening, at t.
func (l *liveness) heardAt(t time.Time) { l.heard, l.asked = t, false }

// next says what is due at now: ask, a status update that asks for a
// reply (once per silence); dead, the connection is silent past the
// timeout; and at, when to look again.
func (l *liveness) next(now time.Time) (ask, dead bool, at time.Time) {
	if l.timeout <= 0 {
		return false, false, time.Time{}
	}
	half, end := l.heard.Add(l.timeout/2), l.heard.Add(l.timeout)
	switch {
	case !now.Before(end):
		return false, true, end
	case !now.Before(half) && !l.asked:
		l.asked = true
		return true, false, end
	case l.asked:
		return false, false, end
	}
	return false, false, half
}

// SilentError ends a session whose replication connection said nothing
// for its timeout (PG_REPLICATION_TIMEOUT): the next session reconnects,
// ending the walsender that may still hold the slot.
type SilentError struct{ For time.Duration }

func (e *SilentError) Error() string {
	return fmt.Sprintf("replication connection silent for %s (PG_REPLICATION_TIMEOUT): the server or the network stopped answering; reconnecting", e.For.Round(time.Millisecond))
}

// replicationTimeout is the liveness timeout: the setting, else the
// server's wal_sender_timeout, else (disabled there) 60 s.
func replicationTimeout(setting, walSenderTimeout time.Duration) time.Duration {
	switch {
	case setting > 0:
		return setting
	case walSenderTimeout > 0:
		return walSenderTimeout
	}
	return 60 * time.Second
}

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
	return replicationTimeout(c.cfg.ReplicationTimeout, p.WALTimeout)
}

package connector

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/replconn"
)

// OpenReplication opens the replication connection with the settings
// every session pins.
func (s *Starter) OpenReplication(ctx context.Context) (*pgconn.PgConn, error) {
	rcfg, err := replconn.Config(s.DSN)
	if err != nil {
		return nil, err
	}
	conn, err := pgconn.ConnectConfig(ctx, rcfg)
	if err != nil {
		return nil, fromPostgres(fmt.Errorf("replication connection: %w", err))
	}
	for _, q := range replconn.PinnedGUCs {
		if _, err := conn.Exec(ctx, q).ReadAll(); err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return nil, fromPostgres(fmt.Errorf("replication connection: %s: %w", q, err))
		}
	}
	return conn, nil
}

// StartReplication starts streaming from the slot. messages: the
// incremental snapshot's watermarks and resnapshot requests are logical
// messages (others are ignored).
func (s *Starter) StartReplication(ctx context.Context, conn *pgconn.PgConn) error {
	if s.SilentEnd {
		if err := s.endSilentWalsender(ctx, conn); err != nil {
			return err
		}
	}
	opts := pglogrepl.StartReplicationOptions{PluginArgs: []string{
		"proto_version '1'",
		"publication_names " + pgvalue.QuoteLiteral(pgvalue.QuoteIdent(s.Publication)),
		"messages 'true'",
	}}
	// The answer is awaited no longer than the liveness timeout: a
	// connection that goes silent here (a NAT dropping the flow) would
	// otherwise hold the session before its heartbeat runs. Silent, the
	// next session ends the walsender, which holds the slot already.
	sctx := ctx
	if s.ReplicationTimeout > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, s.ReplicationTimeout)
		defer cancel()
	}
	if err := pglogrepl.StartReplication(sctx, conn, s.Slot, 0, opts); err != nil {
		if sctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("start replication on slot %s: no answer: %w", s.Slot, &replconn.SilentError{For: s.ReplicationTimeout})
		}
		return fromPostgres(fmt.Errorf("start replication on slot %s: %w", s.Slot, err))
	}
	return nil
}

// endSilentWalsender ends the walsender that still holds the slot after a
// session ended silent: the server may not notice the dead connection
// before its own wal_sender_timeout (or the kernel's retransmissions), and
// the slot stays active, refusing this session, until it does. A role may
// end its own backends (pg_terminate_backend).
func (s *Starter) endSilentWalsender(ctx context.Context, conn *pgconn.PgConn) error {
	pid, err := replconn.TerminateWalsender(ctx, conn, s.Slot)
	if err != nil {
		return fmt.Errorf("end the walsender that held slot %s before the connection went silent: %w", s.Slot, err)
	}
	if pid != "" {
		s.Logger.Warn("session: ended the walsender that still held the slot after the replication connection went silent", "pid", pid)
	}
	return nil
}

// ensureSlot creates the slot when missing. SNAPSHOT 'nothing' is always
// written: an exported snapshot nobody uses would pin xmin.
func (s *Starter) ensureSlot(ctx context.Context, conn *pgconn.PgConn) error {
	slot, err := replconn.ReadSlot(ctx, conn, s.Slot)
	if err != nil || slot.Exists {
		return err
	}
	if _, err := s.createSlot(ctx, conn, false); err != nil {
		return err
	}
	s.Logger.Info("session: created replication slot (stream only, no snapshot)")
	return nil
}

// slotConfirmed reads the slot's confirmed_flush_lsn (0 when it has none).
func slotConfirmed(ctx context.Context, conn *pgconn.PgConn, name string) (pglogrepl.LSN, error) {
	slot, err := replconn.ReadSlot(ctx, conn, name)
	if err != nil {
		return 0, err
	}
	if !slot.Exists {
		return 0, fmt.Errorf("slot %s does not exist after startup", name)
	}
	return slot.Confirmed, nil
}

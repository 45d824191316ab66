package replconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
)

// Slot is what the server says of a replication slot.
type Slot struct {
	Exists bool
	// WalStatus is pg_replication_slots.wal_status ("reserved", "extended",
	// "unreserved", "lost"); empty when the slot has none.
	WalStatus string
	// Confirmed is confirmed_flush_lsn, 0 when the slot has none.
	Confirmed pglogrepl.LSN
	// ActivePID is the walsender that holds the slot, 0 when none does.
	ActivePID int
	// Physical is slot_type = physical (a standby's slot).
	Physical bool
}

// ReadSlot reads slot name on a replication connection; a slot that does
// not exist reads as the zero Slot.
func ReadSlot(ctx context.Context, conn *pgconn.PgConn, name string) (Slot, error) {
	res, err := conn.Exec(ctx, "SELECT coalesce(wal_status, ''), coalesce(confirmed_flush_lsn::text, ''), coalesce(active_pid, 0), slot_type FROM pg_replication_slots WHERE slot_name = "+pgvalue.QuoteLiteral(name)).ReadAll()
	if err != nil {
		return Slot{}, fmt.Errorf("read slot %s: %w", name, err)
	}
	if len(res) == 0 || len(res[0].Rows) == 0 {
		return Slot{}, nil
	}
	row := res[0].Rows[0]
	s := Slot{Exists: true, WalStatus: string(row[0]), Physical: string(row[3]) == "physical"}
	if txt := string(row[1]); txt != "" {
		if s.Confirmed, err = pglogrepl.ParseLSN(txt); err != nil {
			return Slot{}, fmt.Errorf("slot %s: confirmed_flush_lsn %q: %w", name, txt, err)
		}
	}
	if _, err := fmt.Sscan(string(row[2]), &s.ActivePID); err != nil {
		return Slot{}, fmt.Errorf("slot %s: active_pid %q: %w", name, row[2], err)
	}
	return s, nil
}

// SlotRoom reads how many replication slots the server has and how many
// it may have (max_replication_slots).
func SlotRoom(ctx context.Context, conn *pgconn.PgConn) (used, max int, err error) {
	res, err := conn.Exec(ctx, "SELECT (SELECT count(*) FROM pg_replication_slots), current_setting('max_replication_slots')").ReadAll()
	if err != nil {
		return 0, 0, fmt.Errorf("read replication slots: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 {
		return 0, 0, fmt.Errorf("read replication slots: no row")
	}
	row := res[0].Rows[0]
	if _, err := fmt.Sscan(string(row[0])+" "+string(row[1]), &used, &max); err != nil {
		return 0, 0, fmt.Errorf("read replication slots: %q %q: %w", row[0], row[1], err)
	}
	return used, max, nil
}

// FailoverSlot is what a server with failover slots (PostgreSQL 17+) says
// of a slot.
type FailoverSlot struct {
	Exists, Failover, Active bool
	Confirmed                pglogrepl.LSN // 0 when the slot has none
}

// ReadFailoverSlot reads slot name's failover flag on PostgreSQL 17 or
// later (the column does not exist before).
func ReadFailoverSlot(ctx context.Context, conn *pgconn.PgConn, name string) (FailoverSlot, error) {
	res, err := conn.Exec(ctx, "SELECT failover, active, coalesce(confirmed_flush_lsn::text, '') FROM pg_replication_slots WHERE slot_name = "+pgvalue.QuoteLiteral(name)).ReadAll()
	if err != nil {
		return FailoverSlot{}, fmt.Errorf("read slot %s: %w", name, err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 {
		return FailoverSlot{}, nil
	}
	row := res[0].Rows[0]
	s := FailoverSlot{Exists: true, Failover: string(row[0]) == "t", Active: string(row[1]) == "t"}
	if txt := string(row[2]); txt != "" {
		if s.Confirmed, err = pglogrepl.ParseLSN(txt); err != nil {
			return FailoverSlot{}, fmt.Errorf("slot %s: confirmed_flush_lsn %q: %w", name, txt, err)
		}
	}
	return s, nil
}

// Confirmed reads slot name's confirmed_flush_lsn on a normal connection;
// ok is false while the slot has none (or does not exist).
func Confirmed(ctx context.Context, conn *pgx.Conn, name string) (lsn pglogrepl.LSN, ok bool, err error) {
	var txt *string
	if err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", name).Scan(&txt); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, false, nil
		}
		return 0, false, err
	}
	if txt == nil {
		return 0, false, nil
	}
	lsn, err = pglogrepl.ParseLSN(*txt)
	return lsn, err == nil, err
}

// AwaitConfirmed waits, on a connection of its own, until slot name's
// confirmed_flush_lsn reaches lsn, looking every 50 ms until ctx ends,
// and returns the position it saw: the stop-time confirmation (the
// protocol does not acknowledge a status update).
func AwaitConfirmed(ctx context.Context, dsn, name string, lsn pglogrepl.LSN) (pglogrepl.LSN, error) {
	conn, err := Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	for {
		// A look that failed is tried again until ctx ends.
		if confirmed, ok, _ := Confirmed(ctx, conn, name); ok && confirmed >= lsn {
			return confirmed, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TerminateWalsender ends the walsender that holds slot name, if one
// does, and returns its pid ("" when none did). A role may end its own
// backends (pg_terminate_backend).
func TerminateWalsender(ctx context.Context, conn *pgconn.PgConn, name string) (string, error) {
	res, err := conn.Exec(ctx, "SELECT active_pid, pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = "+pgvalue.QuoteLiteral(name)+" AND active_pid IS NOT NULL").ReadAll()
	if err != nil {
		return "", err
	}
	if len(res) > 0 && len(res[0].Rows) > 0 {
		return string(res[0].Rows[0][0]), nil
	}
	return "", nil
}

// Synced reports whether a standby holds a usable synchronized copy of
// slot name (PostgreSQL 17+: synced and not temporary; false before 17,
// which has no synced column), on a normal connection to the standby.
func Synced(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var ok bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots s WHERE slot_name = $1
		AND coalesce((to_jsonb(s) ->> 'synced')::bool, false) AND NOT temporary)`, name).Scan(&ok)
	return ok, err
}

// Created is a new slot: its consistent point and, when exported, the
// snapshot name under which COPY sees exactly what precedes that point.
type Created struct {
	ConsistentPoint pglogrepl.LSN
	SnapshotName    string
}

// CreateSlot creates a pgoutput logical slot on a replication connection.
// The SNAPSHOT option is always written: 'export' keeps a snapshot alive
// until the next command on this connection (so keep it open and idle until
// every COPY has finished); 'nothing' pins no xmin.
//
// With failover the slot is created with FAILOVER (PostgreSQL 17+) in the
// same command: a second command on the connection would destroy the
// exported snapshot.
func CreateSlot(ctx context.Context, conn *pgconn.PgConn, slot string, export, failover bool) (Created, error) {
	action := "nothing"
	if export {
		action = "export"
	}
	opts := fmt.Sprintf("SNAPSHOT '%s'", action)
	if failover {
		opts += ", FAILOVER true"
	}
	res, err := conn.Exec(ctx, fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (%s)", pgvalue.QuoteIdent(slot), opts)).ReadAll()
	if err != nil {
		return Created{}, fmt.Errorf("create slot %s: %w", slot, err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) < 3 {
		return Created{}, fmt.Errorf("create slot %s: unexpected answer", slot)
	}
	row := res[0].Rows[0]
	lsn, err := pglogrepl.ParseLSN(string(row[1]))
	if err != nil {
		return Created{}, fmt.Errorf("create slot %s: consistent point: %w", slot, err)
	}
	return Created{ConsistentPoint: lsn, SnapshotName: string(row[2])}, nil
}

// DropSlot drops a slot, waiting for it to become inactive.
func DropSlot(ctx context.Context, conn *pgconn.PgConn, slot string) error {
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP_REPLICATION_SLOT %s WAIT", pgvalue.QuoteIdent(slot))).ReadAll(); err != nil {
		return fmt.Errorf("drop slot %s: %w", slot, err)
	}
	return nil
}

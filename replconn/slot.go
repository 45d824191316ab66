package replconn

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
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
}

// ReadSlot reads slot name on a replication connection; a slot that does
// not exist reads as the zero Slot.
func ReadSlot(ctx context.Context, conn *pgconn.PgConn, name string) (Slot, error) {
	res, err := conn.Exec(ctx, "SELECT coalesce(wal_status, ''), coalesce(confirmed_flush_lsn::text, ''), coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = "+QuoteLiteral(name)).ReadAll()
	if err != nil {
		return Slot{}, fmt.Errorf("read slot %s: %w", name, err)
	}
	if len(res) == 0 || len(res[0].Rows) == 0 {
		return Slot{}, nil
	}
	row := res[0].Rows[0]
	s := Slot{Exists: true, WalStatus: string(row[0])}
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

// QuoteLiteral quotes s as an SQL string literal (the replication protocol
// has no bind parameters).
func QuoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

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

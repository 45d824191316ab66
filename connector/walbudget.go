package connector

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Under the checkpoint gate, completed work is acknowledged only when a
// checkpoint covers it, and the slot holds its WAL until then. A writer
// fast enough can fill max_slot_wal_keep_size between two timed requests
// (FELDERA_CHECKPOINT_AFTER), and Postgres then invalidates the slot: a
// resnapshot of everything. So a checkpoint is also asked for once the
// waiting work holds a budget of WAL.

// readKeepSize reads max_slot_wal_keep_size in bytes; -1 when unlimited.
func readKeepSize(ctx context.Context, conn *pgx.Conn) (int64, error) {
	var mb int64
	if err := conn.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'max_slot_wal_keep_size'").Scan(&mb); err != nil {
		return 0, fmt.Errorf("read max_slot_wal_keep_size: %w", err)
	}
	if mb < 0 {
		return -1, nil
	}
	return mb << 20, nil
}

// walBudget is the WAL that completed work waiting for a checkpoint may
// hold before one is asked for: the setting when positive, none when
// negative, and when unset a quarter of max_slot_wal_keep_size (keep, in
// bytes; -1 unlimited: none), which leaves three quarters for the
// checkpoint to be taken and the work still in flight.
func walBudget(setting, keep int64) int64 {
	switch {
	case setting > 0:
		return setting
	case setting < 0 || keep <= 0:
		return 0
	}
	return keep / 4
}

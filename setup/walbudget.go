package setup

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

// readWALLimits reads max_slot_wal_keep_size (-1: unlimited) and
// max_wal_size, in bytes (pg_settings gives both in MB).
func readWALLimits(ctx context.Context, conn *pgx.Conn) (keep, maxWAL int64, err error) {
	err = conn.QueryRow(ctx, `SELECT (SELECT setting::bigint FROM pg_settings WHERE name = 'max_slot_wal_keep_size'),
		(SELECT setting::bigint FROM pg_settings WHERE name = 'max_wal_size')`).Scan(&keep, &maxWAL)
	if err != nil {
		return 0, 0, fmt.Errorf("read max_slot_wal_keep_size and max_wal_size: %w", err)
	}
	if keep > 0 {
		keep <<= 20
	}
	return keep, maxWAL << 20, nil
}

// walBudget is the WAL that completed work waiting for a checkpoint may
// hold before one is asked for: the setting when positive, none when
// negative. Unset, a quarter of max_slot_wal_keep_size (keep, in bytes),
// which leaves three quarters for the checkpoint to be taken and the work
// still in flight; none when it is unlimited (-1). At 0 a slot keeps no
// WAL beyond max_wal_size, so a quarter of that.
func walBudget(setting, keep, maxWAL int64) int64 {
	switch {
	case setting > 0:
		return setting
	case setting < 0 || keep < 0:
		return 0
	case keep == 0:
		return maxWAL / 4
	}
	return keep / 4
}

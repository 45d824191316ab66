package setup

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// WALLevel is what a server's settings say about logical decoding.
//
// Before PostgreSQL 19 logical decoding needs wal_level = logical, set at
// server start. From 19 the server also decodes with wal_level = replica
// while at least one valid logical slot exists: creating the first logical
// slot raises effective_wal_level to logical, and dropping or losing the
// last one (max_slot_wal_keep_size, idle_replication_slot_timeout) lowers
// it to replica again, asynchronously, at the checkpointer. Lowering it
// invalidates every logical slot on the standbys (wal_level_insufficient),
// which is what a failover slot relies on. (PostgreSQL 19,
// src/test/recovery/t/051_effective_wal_level.pl.)
type WALLevel struct {
	Version int `json:"server_version_num"`
	// Setting is wal_level; Effective is effective_wal_level, empty
	// before PostgreSQL 19.
	Setting   string `json:"wal_level"`
	Effective string `json:"effective_wal_level,omitempty"`
	// OtherSlots counts the server's usable logical slots other than
	// pgfeldera's.
	OtherSlots int `json:"other_logical_slots"`
}

// ReadWALLevel reads the WAL level settings and the logical slots other
// than slot.
func ReadWALLevel(ctx context.Context, conn *pgx.Conn, slot string) (WALLevel, error) {
	var w WALLevel
	err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('wal_level'),
		coalesce(current_setting('effective_wal_level', true), ''),
		(SELECT count(*) FROM pg_replication_slots
		  WHERE slot_type = 'logical' AND slot_name <> $1 AND coalesce(wal_status, '') <> 'lost')::int`, slot).
		Scan(&w.Version, &w.Setting, &w.Effective, &w.OtherSlots)
	if err != nil {
		return w, fmt.Errorf("read wal_level: %w", err)
	}
	return w, nil
}

// Check says whether pgfeldera can decode on this server: an error when
// it cannot (naming the setting to change), else a note that explains a
// wal_level = replica server and whether the note is a warning (pgfeldera's
// slot is, or will be, the server's only logical slot).
func (w WALLevel) Check() (note string, warn bool, err error) {
	switch {
	case w.Setting == "logical":
		return "", false, nil
	case w.Version < 190000 || w.Setting != "replica":
		need := "set wal_level = logical and restart postgres"
		if w.Version >= 190000 {
			need = "set wal_level = replica (logical decoding then turns on with the first logical slot) or logical, and restart postgres"
		}
		return "", false, fatal.Wrap(fmt.Errorf("postgres wal_level is %q: %s", w.Setting, need))
	}
	note = "wal_level = replica: PostgreSQL decodes logically while a logical slot exists (effective_wal_level = " + w.Effective + ")"
	if w.OtherSlots > 0 {
		return note, false, nil
	}
	return note + "; pgfeldera's slot is the only logical slot, so dropping or losing it turns logical decoding off for the whole server " +
		"and invalidates the logical slots of its standbys; set wal_level = logical to keep it on", true, nil
}

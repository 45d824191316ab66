package snapshot

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/pgfeldera/pgfeldera/delivery"
)

// Loader copies tables into Feldera (the initial snapshot, a resnapshot)
// and retracts from Feldera what Postgres no longer has (TRUNCATE, a
// resnapshot's leftovers), one batch at a time, each waited for. The
// Connector builds one and keeps it; the counters it updates are the
// Connector's, reached through the pointers.
type Loader struct {
	Sender *delivery.Sender
	Bounds delivery.Bounds // BATCH_MAX_ROWS, BATCH_MAX_BYTES

	DSN  string   // libpq DSN of the source database: the snapshot's connection
	GUCs []string // settings that fix the text output of values (the decoder parses text)
	// SnapshotTransaction loads a first snapshot as one Feldera
	// transaction (SNAPSHOT_TRANSACTION).
	SnapshotTransaction bool
	// StateFile and Slot name the spool files: beside the state file,
	// per slot.
	StateFile, Slot string

	// Table gives the counters of the Feldera table a route feeds: its
	// row estimate, and the rows snapshots copied into it.
	Table        func(route int) (estimate, copied *atomic.Int64)
	SnapshotRows *atomic.Int64 // rows copied by snapshots
	Retracted    *atomic.Int64 // delete lines sent by retractions
	Progress     *atomic.Int64 // unix nanos of the last snapshot row (readiness)
	Logger       *slog.Logger

	snapTokens map[string]string // SNAPSHOT_TRANSACTION: each table's newest token; nil outside it
	spoolOnce  sync.Once         // stale spool files removed (spool.go)
}

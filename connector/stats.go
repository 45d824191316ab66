package connector

import (
	"sync/atomic"
	"time"

	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/incremental"
)

// Stats are live counters of a Connector, safe to read from any goroutine
// (the demo's display and the metrics read them).
type Stats struct {
	SnapshotRows atomic.Int64 // rows copied by snapshots
	StreamRows   atomic.Int64 // insert/delete lines decoded from the stream
	Batches      atomic.Int64 // batches Feldera completed (or accepted, in accepted mode)
	Retracted    atomic.Int64 // delete lines sent by retractions
	Sessions     atomic.Int64 // replication sessions started
	// Transactions counts Feldera transactions started
	// (FELDERA_TRANSACTIONS); TransactionConflicts the 409
	// TransactionInProgress answers met meanwhile (another client held it).
	Transactions         atomic.Int64
	TransactionConflicts atomic.Int64
	// PartialCommits counts Feldera transactions committed holding part
	// of a source transaction (delivery.Transactions.NotePart).
	PartialCommits atomic.Int64
	// CheckpointFailures counts Feldera checkpoints asked for that
	// failed (/checkpoint_status).
	CheckpointFailures atomic.Int64
	Received           atomic.Uint64 // highest WAL position read
	Acked              atomic.Uint64 // flush position sent to Postgres
}

// TableStats count one mapped table's rows.
type TableStats struct {
	Source, Dest string
	Inserts      atomic.Int64 // insert lines from the stream
	Deletes      atomic.Int64 // delete lines from the stream
	Copied       atomic.Int64 // rows copied by snapshots
	Nulled       atomic.Int64 // values delivered as NULL: NaN, or unrepresentable with UNREPRESENTABLE_VALUES=null
	// Estimate, and an incremental snapshot's chunks: done (durable,
	// recorded), and done plus the estimate of those left; 0 when none
	// runs.
	incremental.Progress
}

// Stats returns the connector's live counters.
func (c *Connector) Stats() *Stats { return &c.stats }

// Tables returns per-table counters, in TABLES order.
func (c *Connector) Tables() []*TableStats { return c.tableStats }

type nopObserver struct{}

func (nopObserver) Batch(int, time.Duration, time.Duration) {}
func (nopObserver) FelderaError(string)                     {}
func (nopObserver) SessionEnded(string)                     {}
func (nopObserver) Stage(Stage, time.Duration)              {}

// health is what /readyz reads.
type health struct {
	streaming    atomic.Bool
	snapshotting atomic.Bool
	progress     atomic.Int64 // unix nanos of the last snapshot row
	flushSince   atomic.Int64 // unix nanos the in-flight flush started; 0 when none
	flushFailed  atomic.Bool  // the last flush failed; cleared by a success
}

// Gate is the acknowledgement gate of the current session.
func (c *Connector) Gate() delivery.Gate { return delivery.Gate(c.gate.Load()) }

// CheckpointWait is how long completed work has waited for a checkpoint
// (the checkpoint gate); 0 when nothing waits.
func (c *Connector) CheckpointWait() time.Duration {
	if at := c.cp.Waits.Load(); at != 0 {
		return time.Since(time.Unix(0, at))
	}
	return 0
}

// CheckpointWaitWAL is how many bytes of WAL the completed work waiting
// for a checkpoint holds in the slot (the checkpoint gate); 0 when
// nothing waits. FELDERA_CHECKPOINT_WAL bounds it.
func (c *Connector) CheckpointWaitWAL() uint64 {
	if c.cp.Waits.Load() == 0 {
		return 0
	}
	return uint64(c.cp.WAL.Load())
}

// Ready reports whether the connector is doing its job: a session is
// streaming and no flush failed last or has been blocked for a minute;
// during a snapshot, rows were copied within the last minute.
func (c *Connector) Ready() (bool, string) {
	h := &c.health
	now := time.Now().UnixNano()
	if h.snapshotting.Load() {
		if now-h.progress.Load() > int64(c.cfg.ReadyBlockedFor) {
			return false, "snapshot made no progress for " + c.cfg.ReadyBlockedFor.String()
		}
		return true, "snapshotting"
	}
	if !h.streaming.Load() {
		return false, "no replication session"
	}
	if h.flushFailed.Load() {
		return false, "the last flush to Feldera failed"
	}
	if c.cp.Failed.Load() {
		why := "a Feldera checkpoint failed"
		if e := c.cp.Error.Load(); e != nil {
			why += ": " + *e
		}
		return false, why
	}
	if since := h.flushSince.Load(); since != 0 && now-since > int64(c.cfg.ReadyBlockedFor) {
		return false, "a flush has been waiting for Feldera for over " + c.cfg.ReadyBlockedFor.String()
	}
	return true, "streaming"
}

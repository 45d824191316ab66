package connector

import (
	"errors"
	"log/slog"
	"time"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/failover"
	"github.com/pgfeldera/pgfeldera/incremental"
)

// Ack modes.
const (
	AckCompleted = "completed"
	AckAccepted  = "accepted" // unsafe: acks on HTTP 200
)

// FELDERA_TRANSACTIONS values (delivery/txnplan.go).
const (
	TxnAuto   = delivery.TxnAuto
	TxnAlways = delivery.TxnAlways
	TxnOff    = delivery.TxnOff
)

// Snapshot modes.
const (
	SnapshotInitial      = "initial"
	SnapshotNever        = "never"
	SnapshotIncremental  = "incremental"
	SnapshotInconsistent = "inconsistent"
)

// Defaults.
const (
	DefaultBatchMaxRows      = 10000
	DefaultBatchMaxBytes     = 4 << 20
	DefaultBatchMaxInFlight  = 64
	DefaultBatchLinger       = 50 * time.Millisecond
	DefaultCompletionTimeout = 60 * time.Second
	// DefaultCommitStallTimeout: a commit may take as long as the views
	// need; it is given up only after this long without progress.
	DefaultCommitStallTimeout = 5 * time.Minute
	DefaultNoProgressTimeout  = 5 * time.Minute
	DefaultIngressFence       = 35 * time.Second
	DefaultStopTimeout        = 20 * time.Second
	DefaultCheckpointAfter    = 30 * time.Second
)

// Slot failover settings (PG_SLOT_FAILOVER; failover.Auto, On, Off).
const (
	FailoverAuto = failover.Auto
	FailoverOn   = failover.On
	FailoverOff  = failover.Off
)

// DefaultChunkRows is a chunk's rows when SNAPSHOT_CHUNK_ROWS is empty
// (incremental.DefaultChunkRows says why).
const DefaultChunkRows = incremental.DefaultChunkRows

// ReadyBlockedFor is the default Config.ReadyBlockedFor: how long a flush
// may wait before the connector stops being ready.
const ReadyBlockedFor = time.Minute

// Config configures a connector.Connector.
type Config struct {
	DSN               string // libpq DSN of the source database
	Publication       string
	Slot              string
	Tables            []catalog.Table
	AckMode           string
	RequirePrimaryKey bool
	CompletionTimeout time.Duration
	// CommitStallTimeout bounds a Feldera transaction's commit by its
	// progress: the commit wait fails only once /stats showed no progress
	// (commit_progress, the transaction's state, records processed) for
	// this long. Default DefaultCommitStallTimeout
	// (FELDERA_COMMIT_STALL_TIMEOUT).
	CommitStallTimeout time.Duration
	BatchMaxRows       int
	// SnapshotChunkRows is an incremental snapshot's chunk size in rows
	// (0: DefaultChunkRows); BatchMaxBytes bounds a chunk too.
	SnapshotChunkRows int
	// SnapshotParallelism is how many chunks of a table are read at once,
	// each lane on its own connection (0 or 1: one).
	SnapshotParallelism int
	// BatchMaxBytes seals a batch once its NDJSON reaches this many bytes
	// (a row larger than it goes alone): with BatchMaxRows, the memory
	// bound whatever the row width. Default DefaultBatchMaxBytes.
	BatchMaxBytes int
	// BatchMaxInFlight is how many batches may be sent and not yet
	// complete at once. They are POSTed one at a time in source order;
	// only their completion waits overlap. Default DefaultBatchMaxInFlight.
	BatchMaxInFlight int
	BatchLinger      time.Duration
	// Transactions is FELDERA_TRANSACTIONS: TxnAuto (default) wraps a
	// flush that holds several tables or part of a source transaction in
	// a Feldera transaction, TxnAlways every flush, TxnOff none (see
	// delivery/txnplan.go).
	Transactions string
	// ProgressTable is FELDERA_PROGRESS_TABLE: setup.ProgressAuto (use the
	// pipeline's progress table when it declares one, unless
	// FELDERA_TRANSACTIONS=off; the default), ProgressOn (require it) or
	// ProgressOff (ignore it; setup/progress.go).
	ProgressTable string
	// SnapshotTransaction loads an initial snapshot (not a resnapshot
	// with retraction) as one Feldera transaction: views see no table
	// until all of them are in, and are computed once. Feldera takes no
	// checkpoint while it is open. Default off (SNAPSHOT_TRANSACTION).
	SnapshotTransaction bool
	// NullUnrepresentable (UNREPRESENTABLE_VALUES=null) delivers a value
	// Feldera cannot hold (infinity, BC, year > 9999) as NULL into a
	// nullable column, logged once per column and counted, instead of
	// refusing it.
	NullUnrepresentable bool
	SnapshotMode        string
	// SlotFailover (PG_SLOT_FAILOVER): FailoverAuto (default), FailoverOn,
	// FailoverOff.
	SlotFailover string
	// ReplicationTimeout ends a session whose replication connection said
	// nothing for this long (a reply is asked for at half of it); 0 takes
	// the server's wal_sender_timeout (PG_REPLICATION_TIMEOUT).
	ReplicationTimeout time.Duration
	StateFile          string
	NoProgressTimeout  time.Duration

	// IngressFence is how long an ingress request that got no clear answer
	// may still be queued by Feldera (its manager forwards ingress with a
	// 30 s timeout). Nothing newer is sent until it has passed, so a late
	// copy of old rows cannot overwrite newer ones. Default 35 s.
	IngressFence time.Duration

	// StopTimeout bounds a graceful stop: after Run's context ends, the
	// in-flight work has this long to complete and be acknowledged; then
	// it is abandoned (nothing unfinished is acknowledged; the slot
	// replays it) and Run returns nil. Default 20 s, under Kubernetes'
	// 30 s grace period.
	StopTimeout time.Duration

	// CheckpointAfter, under the checkpoint gate (at_least_once), asks
	// Feldera for a checkpoint (POST /checkpoint) once completed work has
	// waited this long for one, so that the WAL the slot retains stays
	// bounded even when the pipeline's own interval is long or off.
	// Default DefaultCheckpointAfter.
	CheckpointAfter time.Duration

	// CheckpointWAL, under the checkpoint gate, also asks for a checkpoint
	// once completed work waiting for one holds this many bytes of WAL,
	// so that a fast writer cannot push the slot toward
	// max_slot_wal_keep_size (and invalidation) between timed requests.
	// 0: a quarter of max_slot_wal_keep_size (of max_wal_size when it is
	// 0), none when it is -1 (unlimited);
	// negative: none.
	CheckpointWAL int64

	// ReadyBlockedFor is how long a flush (or, during a snapshot, the copy)
	// may make no progress before Ready reports not ready. Default
	// ReadyBlockedFor (a minute).
	ReadyBlockedFor time.Duration

	// Observer sees batches, Feldera errors and session ends (metrics); nil
	// means none.
	Observer Observer

	// BackoffInitial and BackoffMax bound the reconnect backoff (1s, 30s).
	BackoffInitial time.Duration
	BackoffMax     time.Duration

	Logger *slog.Logger
}

// WithDefaults checks the settings connector.New requires and fills in
// the defaults of the others.
func (cfg Config) WithDefaults() (Config, error) {
	if cfg.Publication == "" || cfg.Slot == "" || len(cfg.Tables) == 0 || cfg.DSN == "" {
		return cfg, errors.New("connector: DSN, publication, slot and tables are required")
	}
	if cfg.AckMode == "" {
		cfg.AckMode = AckCompleted
	}
	positive(&cfg.BatchMaxRows, DefaultBatchMaxRows)
	positive(&cfg.BatchMaxBytes, DefaultBatchMaxBytes)
	if err := transactionDefaults(&cfg); err != nil {
		return cfg, err
	}
	positive(&cfg.BatchMaxInFlight, DefaultBatchMaxInFlight)
	positive(&cfg.CompletionTimeout, DefaultCompletionTimeout)
	positive(&cfg.CommitStallTimeout, DefaultCommitStallTimeout)
	positive(&cfg.NoProgressTimeout, DefaultNoProgressTimeout)
	if cfg.SnapshotMode == "" {
		cfg.SnapshotMode = SnapshotInitial
	}
	positive(&cfg.IngressFence, DefaultIngressFence)
	positive(&cfg.StopTimeout, DefaultStopTimeout)
	positive(&cfg.CheckpointAfter, DefaultCheckpointAfter)
	positive(&cfg.ReadyBlockedFor, ReadyBlockedFor)
	positive(&cfg.BackoffInitial, time.Second)
	positive(&cfg.BackoffMax, 30*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}

// positive sets *v to d when the setting left it zero or negative.
func positive[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

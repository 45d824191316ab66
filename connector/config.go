package connector

import "github.com/pgfeldera/pgfeldera/config"

// Config configures a Connector (config.Config).
type Config = config.Config

// Observer receives events worth a histogram or a labelled counter
// (config.Observer). All methods may be called from several goroutines.
type Observer = config.Observer

// Ack modes (config.AckCompleted, config.AckAccepted).
const (
	AckCompleted = config.AckCompleted
	AckAccepted  = config.AckAccepted // unsafe: acks on HTTP 200
)

// FELDERA_TRANSACTIONS values (config.TxnAuto, …; outbox/txn.go).
const (
	TxnAuto   = config.TxnAuto
	TxnAlways = config.TxnAlways
	TxnOff    = config.TxnOff
)

// Snapshot modes (config.SnapshotInitial, …).
const (
	SnapshotInitial      = config.SnapshotInitial
	SnapshotNever        = config.SnapshotNever
	SnapshotIncremental  = config.SnapshotIncremental
	SnapshotInconsistent = config.SnapshotInconsistent
)

// Slot failover settings (PG_SLOT_FAILOVER; config.FailoverAuto, …).
const (
	FailoverAuto = config.FailoverAuto
	FailoverOn   = config.FailoverOn
	FailoverOff  = config.FailoverOff
)

// Defaults (config.DefaultBatchMaxRows, …).
const (
	DefaultBatchMaxRows       = config.DefaultBatchMaxRows
	DefaultBatchMaxBytes      = config.DefaultBatchMaxBytes
	DefaultBatchMaxInFlight   = config.DefaultBatchMaxInFlight
	DefaultBatchLinger        = config.DefaultBatchLinger
	DefaultCompletionTimeout  = config.DefaultCompletionTimeout
	DefaultCommitStallTimeout = config.DefaultCommitStallTimeout
	DefaultNoProgressTimeout  = config.DefaultNoProgressTimeout
	DefaultIngressFence       = config.DefaultIngressFence
	DefaultStopTimeout        = config.DefaultStopTimeout
	DefaultCheckpointAfter    = config.DefaultCheckpointAfter
	// DefaultChunkRows is a chunk's rows when SNAPSHOT_CHUNK_ROWS is empty.
	DefaultChunkRows = config.DefaultChunkRows
	// ReadyBlockedFor is the default Config.ReadyBlockedFor: how long a
	// flush may wait before the connector stops being ready.
	ReadyBlockedFor = config.ReadyBlockedFor
)

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

// FELDERA_TRANSACTIONS values (config.TxnAuto, …; delivery/txnplan.go).
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

// FailoverOn is PG_SLOT_FAILOVER=on (config.FailoverOn).
const FailoverOn = config.FailoverOn

// ReadyBlockedFor is the default Config.ReadyBlockedFor: how long a
// flush may wait before the connector stops being ready
// (config.ReadyBlockedFor).
const ReadyBlockedFor = config.ReadyBlockedFor

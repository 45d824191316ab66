package connector

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/failover"
	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/internal/testhook"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/snapshot"
	"github.com/pgfeldera/pgfeldera/state"
)

// Starter starts one session on its replication connection. The
// Connector builds one per session; Begin writes only its unexported
// fields (the server it reached, the connection it kept).
type Starter struct {
	DSN, Slot, Publication, StateFile string
	Tables                            []catalog.Table
	SlotFailover                      string // PG_SLOT_FAILOVER
	// SNAPSHOT_MODE: never, incremental or inconsistent (initial when
	// none is set).
	Never, Incremental, Inconsistent bool
	ChunkRows                        int // SNAPSHOT_CHUNK_ROWS (incremental.ChunkRows)

	// First says no session ran yet in this process (failoverChecker).
	First bool
	// Acked is this process's last acknowledgement (0: none), SentHigh the
	// highest WAL position of a change it sent Feldera: after a failover,
	// a fork before it means phantom rows.
	Acked, SentHigh pglogrepl.LSN
	// SilentEnd: the last session ended silent; StartReplication ends the
	// walsender that may still hold the slot. ReplicationTimeout bounds
	// the wait for START_REPLICATION's answer (the liveness timeout; 0:
	// none).
	SilentEnd          bool
	ReplicationTimeout time.Duration

	Loader *snapshot.Loader // copies the tables into Feldera (snapshot)
	// Watcher is a watcher of the pipeline a plan describes, for the
	// checkpoint wait under at_least_once; CP is what it shares of
	// checkpoints.
	Watcher func(p *setup.Plan) *delivery.Watcher
	CP      *delivery.Checkpoints
	// Snapshotting and Progress are the health marks of the copy (what
	// /readyz reads): a copy runs, and the unix nanos of its last row.
	Snapshotting *atomic.Bool
	Progress     *atomic.Int64
	// PublishGate publishes the gate a journal gap moved (reconcile).
	PublishGate func(delivery.Gate)
	// ResetProgress writes the progress row at lsn and waits for it (nil:
	// no progress table is used; progress.go).
	ResetProgress func(ctx context.Context, lsn pglogrepl.LSN) error
	// ReadProgress reads the progress row (nil with ResetProgress): after
	// a failover, what it held before it is cleared says what Feldera
	// holds (progress.go).
	ReadProgress func(ctx context.Context) (pglogrepl.LSN, bool, error)
	// Identified sees the server once the session identified it, before
	// anything reads the progress row: the row is keyed by its source
	// (delivery.Progress.Keyed). Nil: nothing to key.
	Identified func(failover.Server)
	// ProgressFingerprint is the progress table's definition
	// (setup.Fingerprint), with ResetProgress.
	ProgressFingerprint string
	Logger              *slog.Logger
	Hooks               *testhook.Hooks // the tests' seams; zero in production

	srv   failover.Server   // the server Begin reached
	spare incremental.Spare // the connection for chunks an incremental start opened
	// heldBefore is the progress row a change of server cleared: the end
	// of the last source transaction Feldera held from the old history.
	heldBefore pglogrepl.LSN
}

// Started is what Begin found, for the Connector to apply: the server
// the session reached, the slot's confirmed position, and the connection
// for chunks an incremental start opened (nil when none), which the
// session's incremental snapshot takes.
type Started struct {
	Server    failover.Server
	Confirmed pglogrepl.LSN
	Spare     *pgx.Conn
}

// Begin decides where the session starts: which server this is, whether
// its state can be continued, the snapshot or resnapshot the startup
// plan needs, and the slot's confirmed position. What it found is
// returned with its error too: the server as far as it was identified,
// and the connection for chunks, for the Connector to close.
func (s *Starter) Begin(ctx context.Context, p *setup.Plan, conn *pgconn.PgConn) (Started, error) {
	confirmed, err := s.begin(ctx, p, conn)
	return Started{Server: s.srv, Confirmed: confirmed, Spare: s.spare.Take()}, err
}

func (s *Starter) begin(ctx context.Context, p *setup.Plan, conn *pgconn.PgConn) (pglogrepl.LSN, error) {
	// Which server this is (after a failover, the promoted standby): its
	// identity decides whether the state can be continued (package
	// failover).
	var err error
	if s.srv, err = failover.Identify(ctx, conn, s.SlotFailover); err != nil {
		return 0, err
	}
	if s.Identified != nil {
		s.Identified(s.srv)
	}
	if err := s.failoverChecker().Preflight(ctx, conn, s.srv); err != nil {
		return 0, err
	}
	if err := s.serverMoved(ctx); err != nil {
		return 0, err
	}
	if err := s.startup(ctx, p, conn); err != nil {
		return 0, err
	}
	if err := failover.RecordServer(s.StateFile, s.srv); err != nil {
		return 0, err
	}
	// Positions come from the server, never from an earlier session's
	// memory: after a failover or a slot recreated by a snapshot, the
	// slot may be behind what this process last acknowledged, and a
	// status update must not claim more than the slot holds.
	return slotConfirmed(ctx, conn, s.Slot)
}

// failoverChecker checks a session's server for failover (package
// failover). The first session of the process may refuse an empty
// synchronized_standby_slots under PG_SLOT_FAILOVER=on; later ones,
// after a failover, only warn.
func (s *Starter) failoverChecker() *failover.Checker {
	return &failover.Checker{DSN: s.DSN, Slot: s.Slot, Setting: s.SlotFailover,
		First: s.First, Logger: s.Logger}
}

// reconcile checks what the restarted Feldera and the catalog hold
// against the state (setup.Reconcile), under this connector's rules, and
// publishes the gate a journal gap moved.
func (s *Starter) reconcile(p *setup.Plan, st *state.State) (string, error) {
	before := p.Gate
	why, err := setup.Reconcile(p, st, setup.Rules{StateFile: s.StateFile, Logger: s.Logger,
		TrustRestores: s.Hooks.TrustRestores, IgnoreShape: s.Hooks.IgnoreShape, GateForced: s.Hooks.ForceGate != nil})
	if p.Gate != before {
		s.PublishGate(p.Gate)
	}
	return why, err
}

package setup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/failover"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/state"
)

// CheckReport is what check found: every problem that would stop a run,
// and, for the reader, what the run would do.
type CheckReport struct {
	Problems Problems `json:"problems"`
	// Model is the pipeline's fault-tolerance model and Gate the ack gate
	// it implies ("complete" or "checkpoint"); empty when the pipeline
	// could not be read.
	Model string `json:"fault_tolerance,omitempty"`
	Gate  string `json:"ack_gate,omitempty"`
	// Tables counts the mapped tables with a complete decoding plan.
	Tables int `json:"tables_ready"`
	// CheckpointWAL is the WAL budget that asks for a checkpoint under
	// the checkpoint gate, in bytes (0: by time only).
	CheckpointWAL int64 `json:"checkpoint_wal_bytes,omitempty"`
	// ExactlyOnce says whether a run would use the progress table, and
	// Replays what the user gets either way (ProgressSays).
	ExactlyOnce bool   `json:"exactly_once"`
	Replays     string `json:"replays,omitempty"`
}

// OK reports whether a run would start.
func (r *CheckReport) OK() bool { return len(r.Problems) == 0 }

// CheckOptions are the settings check looks at beyond those of the
// startup checks (setup.Config).
type CheckOptions struct {
	StateFile    string // STATE_FILE
	SlotFailover string // PG_SLOT_FAILOVER
	AckAccepted  bool   // FELDERA_ACK_MODE=accepted: the gate it implies
}

// Check looks at every prerequisite of a run at once, with the startup
// checks a run makes (setup.Prepare) and those only a run's later steps
// would find: the replication connection (the role's REPLICATION,
// pg_hba.conf, a free walsender), a free replication slot, the slot not
// held by another consumer, and the state file's directory and lock. It
// changes nothing: no slot is created, no checkpoint asked for. The error
// is for what stopped the look itself (a query that failed mid-way).
func Check(ctx context.Context, cfg Config, opts CheckOptions, pipes Pipeliner) (*CheckReport, error) {
	r := &CheckReport{}
	var ps Found
	ps.Add("STATE_FILE", checkStateFile(opts.StateFile))
	p, err := Prepare(ctx, cfg, pipes, ForCheck)
	var found Problems
	switch {
	case errors.As(err, &found):
		ps.List = append(ps.List, found...)
	case errors.As(err, new(*pgconn.ConnectError)):
		// No connection: nothing on the Postgres side can be read.
		ps.Add("PG_DSN", Refuse("PG_DSN", err.Error(), "check PG_DSN, that the server runs and that pg_hba.conf admits this client"))
		if _, err := ReadPipeline(ctx, pipes, cfg.Logger, &Plan{}, ForCheck, &ps); err != nil {
			return nil, err
		}
		r.Problems = ps.List
		return r, nil
	case err != nil:
		if !ps.Add("", err) {
			return nil, err
		}
	}
	if p != nil {
		r.Tables = len(p.Targets)
		if len(found) > 0 {
			r.Tables = 0 // the plan is not whole
		}
		r.CheckpointWAL = p.WALBudget
		r.ExactlyOnce, r.Replays = p.Progress != nil, ProgressSays(cfg.Progress, p.Progress != nil)
		if p.Model != "" {
			r.Model, r.Gate = string(p.Model), delivery.GateFor(p.Model, opts.AckAccepted).String()
		}
	}
	if err := checkReplication(ctx, cfg.DSN, cfg.Slot, opts.SlotFailover, &ps); err != nil {
		return nil, err
	}
	r.Problems = ps.List
	return r, nil
}

// checkStateFile refuses a state file whose directory cannot hold it (a
// run writes the state, its fence and temporary files there, and renames
// them into place) or that another process holds.
func checkStateFile(path string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".pgfeldera-check-*")
	if err != nil {
		return Refuse("STATE_FILE", fmt.Sprintf("the directory of STATE_FILE %s cannot hold it: %v", path, err),
			"create "+dir+", writable by the user pgfeldera runs as")
	}
	f.Close()
	os.Remove(f.Name())
	lock, err := state.Lock(path)
	var locked *state.LockedError
	if errors.As(err, &locked) {
		return Refuse("STATE_FILE", locked.Error(), "")
	}
	if err != nil {
		return Refuse("STATE_FILE", err.Error(), "make "+state.LockPath(path)+" writable by the user pgfeldera runs as")
	}
	return lock.Unlock()
}

// checkReplication opens a replication connection as a run does and
// identifies the server (the role's REPLICATION, pg_hba.conf's
// replication lines and a free walsender all show here), then looks at
// the slot: free for another consumer, or room for a new one.
func checkReplication(ctx context.Context, dsn, slotName, failoverSetting string, ps *Found) error {
	rcfg, err := replconn.Config(dsn)
	if ps.Add("PG_DSN", err) || err != nil {
		return OrNil(err)
	}
	conn, err := pgconn.ConnectConfig(ctx, rcfg)
	if err != nil {
		ps.Add("PG_DSN", Refuse("PG_DSN", "replication connection: "+err.Error(), replicationFix(err, rcfg.User)))
		return nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := failover.Identify(ctx, conn, failoverSetting); ps.Add("PG_SLOT_FAILOVER", err) || err != nil {
		return OrNil(err)
	}
	slot, err := replconn.ReadSlot(ctx, conn, slotName)
	if err != nil {
		return err
	}
	used, max, err := replconn.SlotRoom(ctx, conn)
	if err != nil {
		return err
	}
	switch {
	case slot.Exists && slot.ActivePID != 0:
		ps.Add("PG_SLOT", Refuse("PG_SLOT", fmt.Sprintf("slot %s is in use by another consumer (walsender pid %d)", slotName, slot.ActivePID),
			"stop the other consumer, or give this connector its own PG_SLOT"))
	case !slot.Exists && used >= max:
		ps.Add("PG_SLOT", Refuse("PG_SLOT", fmt.Sprintf("slot %s does not exist and every replication slot is taken (%d of max_replication_slots = %d)", slotName, used, max),
			"drop an unused slot (pg_drop_replication_slot), or raise max_replication_slots and restart postgres"))
	}
	return nil
}

// replicationFix is the fix for a replication connection's refusal, by
// its SQLSTATE.
func replicationFix(err error, user string) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return "check that pg_hba.conf admits replication connections from this client"
	}
	switch pe.Code {
	case "42501": // insufficient_privilege: the role lacks REPLICATION
		return "ALTER ROLE " + pgvalue.QuoteIdent(user) + " REPLICATION"
	case "53300": // too_many_connections: no free walsender
		return "raise max_wal_senders (and restart postgres), or stop an idle replication client"
	case "28000", "28P01": // invalid_authorization_specification, invalid_password
		return "pg_hba.conf needs a line for this client's replication connections (database 'replication' covers only physical ones; a logical one matches the database name), and the password must be right"
	}
	return "see the server's message"
}

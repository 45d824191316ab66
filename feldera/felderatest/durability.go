package felderatest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/table"
)

// Durability: the step counter, checkpoints, /stats, and restarts in place
// that keep the deployment and change the incarnation. What a restart in
// place keeps depends on the fault-tolerance model, as in Feldera
// (DURABILITY.md §2.2):
//
//   - none: nothing (a restart loses the tables);
//   - at_least_once: the last checkpoint, and only it: data completed after
//     it is gone, even though its tokens said complete;
//   - exactly_once: everything completed (the journal replays it).
//
// Data accepted but not yet stepped is lost under every model.

// keptCheckpoints is how many checkpoints Feldera keeps: it removes the
// oldest beyond MIN_CHECKPOINT_THRESHOLD (crates/dbsp/src/circuit/
// checkpointer.rs, gc_checkpoint).
const keptCheckpoints = 2

// checkpoint is one checkpoint the double took: the tables as they were.
type checkpoint struct {
	meta   feldera.Checkpoint
	tables map[string]table.State
	rels   map[string]feldera.Relation // the definitions they were taken under
}

// Checkpoint takes a checkpoint now, as the periodic timer would: it
// covers every step run so far. It fails without fault tolerance or with
// Config.NoCheckpoints (Feldera's OSS edition).
func (s *Server) Checkpoint() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ft.Model() == "none" || s.cfg.NoCheckpoints {
		return fmt.Errorf("felderatest: this pipeline cannot checkpoint")
	}
	s.checkpointLocked(time.Now())
	return nil
}

// checkpointLocked takes a checkpoint of the state between steps: it
// covers the steps that ended (a step in progress has not changed the
// tables yet). Under FailCheckpoints it fails instead, as a checkpoint
// whose storage fails does (controller.rs records the error in
// /checkpoint_status).
func (s *Server) checkpointLocked(now time.Time) {
	s.ckptSeq++
	if s.ckptFail != "" {
		s.ckptFailure = map[string]any{"sequence_number": s.ckptSeq, "error": s.ckptFail, "failed_at": now.UTC().Format(time.RFC3339Nano)}
		s.lastCheckpoint = now
		return
	}
	done := s.c.Steps
	if s.c.Busy() {
		done--
	}
	cp := checkpoint{meta: feldera.Checkpoint{UUID: newUUID(), Fingerprint: uint64(s.ckptSeq), Steps: done, ProcessedRecords: s.processed},
		tables: map[string]table.State{}, rels: map[string]feldera.Relation{}}
	for name, t := range s.tables {
		cp.tables[name] = t.Save()
		cp.rels[name] = t.Rel
	}
	s.checkpoints = append(s.checkpoints, cp)
	if len(s.checkpoints) > keptCheckpoints {
		s.checkpoints = s.checkpoints[len(s.checkpoints)-keptCheckpoints:]
	}
	s.lastCheckpoint = now
	s.ckptSuccess = s.ckptSeq
	s.journalGap = false // journaling resumes from a checkpoint
}

// periodic takes the checkpoint Config.CheckpointEvery asks for once its
// time has come (looked at whenever a request arrives: a client polling
// /checkpoints sees them on time).
func (s *Server) periodic(now time.Time) {
	every := s.ft.Interval()
	if every <= 0 || s.ft.Model() == "none" || s.cfg.NoCheckpoints {
		return
	}
	s.c.Advance(now)
	if s.c.Busy() || s.c.InTransaction() {
		return // taken between steps, and never inside a transaction
	}
	if s.lastCheckpoint.IsZero() {
		s.lastCheckpoint = now
		return
	}
	if now.Sub(s.lastCheckpoint) >= every {
		s.checkpointLocked(now)
	}
}

// RestartInPlace restarts the pipeline process without a new deployment:
// a new incarnation_uuid, the same deployment_id, old tokens 410, queued
// data lost, and table state as the model keeps it (see above). A restore
// resumes the step counter from the checkpoint's steps (controller.rs,
// ControllerInit), so step numbers repeat those of the process before, and
// takes no checkpoint of its own: the first comes one interval later.
func (s *Server) RestartInPlace() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restartInPlace()
	switch s.ft.Model() {
	case "none":
		s.restore(-1)
		s.checkpoints = nil
	case "at_least_once":
		s.restore(len(s.checkpoints) - 1)
	case "exactly_once":
		if s.journalGap {
			// Journaling is off after a program change until the next
			// checkpoint: only the last checkpoint is kept.
			s.restore(len(s.checkpoints) - 1)
		}
	}
}

// restartInPlace is what every restart in place does: a new process.
func (s *Server) restartInPlace() {
	dep := s.deploymentID
	s.newIncarnation()
	s.deploymentID = dep
	s.ckptSeq, s.ckptSuccess, s.ckptFailure = 0, 0, nil // sequence numbers are per process
	s.lastCheckpoint = time.Time{}
}

// restore makes the tables those of checkpoint i (empty for -1) and
// resumes the step and record counters from it. A table whose definition
// changed since the checkpoint was taken (a program change) starts
// empty: the pipeline bootstraps it again.
func (s *Server) restore(i int) {
	for _, t := range s.tables {
		t.Clear()
	}
	s.c.Steps, s.processed = 0, 0
	if i < 0 || i >= len(s.checkpoints) {
		return
	}
	cp := s.checkpoints[i]
	for name, st := range cp.tables {
		if t, ok := s.tables[name]; ok && table.SameDefinition(cp.rels[name], t.Rel) {
			t.Restore(st)
		}
	}
	s.c.Steps, s.processed = cp.meta.Steps, cp.meta.ProcessedRecords
}

// RestartEmptyStore restarts the pipeline in place with its storage gone
// (a pod recreated with an empty volume): the same deployment, a new
// incarnation, no checkpoints, empty tables, the step counter at 0,
// whatever the model.
func (s *Server) RestartEmptyStore() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restartInPlace()
	s.checkpoints = nil
	s.restore(-1)
}

// RestartFromOlder restarts the pipeline in place from the checkpoint
// back places before the newest (an operator starting it from an older,
// synced checkpoint, or storage rolled back): the newer checkpoints are
// gone, and so is what they held.
func (s *Server) RestartFromOlder(back int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.checkpoints) - 1 - back
	if back < 1 || i < 0 {
		return fmt.Errorf("felderatest: no checkpoint %d places before the newest (there are %d)", back, len(s.checkpoints))
	}
	s.restartInPlace()
	s.checkpoints = s.checkpoints[:i+1]
	s.restore(i)
	return nil
}

// RedeployCleared redeploys the pipeline after its storage was cleared: a
// new deployment and incarnation, no checkpoints, empty tables, whatever
// the model.
func (s *Server) RedeployCleared() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.newIncarnation()
	s.checkpoints = nil
	s.restore(-1)
	s.ckptSeq, s.ckptSuccess, s.ckptFailure, s.lastCheckpoint = 0, 0, nil, time.Time{}
}

// ChangeProgram replaces the program with the tables of ddl, the way
// Feldera allows it: only while the pipeline is stopped (the pipeline
// manager answers UpdateRestrictedToStopped otherwise), so the stop takes
// a checkpoint first (under fault tolerance); program_version goes up and
// the start is a new deployment that bootstraps
// (docs.feldera.com/docs/pipelines/modifying.md, "Bootstrapping";
// controller.rs logs that a modified table's state was cleared). A table
// whose definition changed (fields and their types, primary key,
// materialized, properties such as append_only) or is new starts empty;
// the others, and the checkpoints, are kept. Without fault tolerance
// nothing is kept. Under exactly_once the input journal is discarded at
// the change and journaling stays off until the next checkpoint (none is
// taken when bootstrapping ends): a restart in place meanwhile restores
// the stop's checkpoint. It returns the canonical names of the tables
// that start empty.
func (s *Server) ChangeProgram(ddl string) ([]string, error) {
	rels, err := ParseDDL(ddl)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Advance(time.Now())
	ft := s.ft.Model() != "none" && !s.cfg.NoCheckpoints
	if ft {
		s.checkpointLocked(time.Now()) // the stop's checkpoint
	}
	old := s.tables
	s.tables, s.order = map[string]*table.Table{}, nil
	var cleared []string
	for _, rel := range rels {
		t, err := table.New(rel)
		if err != nil {
			s.tables = old
			return nil, err
		}
		t.WatchOrder(s.cfg.OrderColumn)
		name := rel.CanonicalName()
		if prev, ok := old[name]; ok && ft && table.SameDefinition(prev.Rel, rel) {
			t.Restore(prev.Save())
		} else {
			cleared = append(cleared, name)
		}
		s.tables[name] = t
		s.order = append(s.order, name)
	}
	s.programVersion++
	s.newIncarnation()
	s.ckptSeq, s.ckptSuccess, s.ckptFailure, s.lastCheckpoint = 0, 0, nil, time.Time{}
	s.journalGap = s.ft.Model() == "exactly_once"
	return cleared, nil
}

// FailCheckpoints makes every checkpoint fail with msg from now on (the
// storage fails): POST /checkpoint still answers 200 at once, as Feldera
// runs the checkpoint in the background (server.rs), and the failure
// shows in /checkpoint_status; no checkpoint is added. "" lets them
// succeed again.
func (s *Server) FailCheckpoints(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ckptFail = msg
}

// SetPermanentCheckpointErrors makes /stats report why no checkpoint can
// succeed until the pipeline's configuration changes, each a JSON value
// as Feldera serializes a PermanentSuspendError ("StorageRequired",
// "EnterpriseFeature", {"UnsupportedInputEndpoint": name}), in the
// controller status's permanent_checkpoint_errors (an Option: null when
// there are none; DURABILITY.md, /stats), and every checkpoint fail with
// the first (FIDELITY.md 13: Feldera refuses to checkpoint then). None
// clears them.
func (s *Server) SetPermanentCheckpointErrors(errs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.permErrors = nil
	for _, e := range errs {
		s.permErrors = append(s.permErrors, json.RawMessage(e))
	}
	s.ckptFail = ""
	if len(errs) > 0 {
		s.ckptFail = "cannot checkpoint: " + errs[0]
	}
}

// Steps is how many steps the pipeline has run (its circuit step count).
func (s *Server) Steps() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.Steps
}

// Incarnation is the current incarnation_uuid.
func (s *Server) Incarnation() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.incarnation
}

// CheckpointRequests is how many POST /checkpoint requests were answered
// with a checkpoint.
func (s *Server) CheckpointRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ckptRequests
}

// ---- HTTP ----

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	// A connector waiting for its transaction's input to be taken polls
	// /stats: under StepsOnPoll that wait runs the steps.
	s.c.Run(now, !s.cfg.StepsOnPoll || s.c.Initiated() || s.c.InTransaction())
	outputs := make([]map[string]any, 0, len(s.cfg.OutputEndpoints))
	for _, name := range s.cfg.OutputEndpoints {
		outputs = append(outputs, map[string]any{"endpoint_name": name, "config": map[string]any{"stream": name}})
	}
	activity := map[string]any{"status": "idle"}
	txnStatus, txnID := s.c.TxnStats()
	msecs, records, progress := s.c.TxnMetrics(now)
	if s.deferredCheckpoint {
		activity = map[string]any{"status": "delayed", "reasons": []string{"TransactionInProgress"}}
	}
	writeJSON(w, 200, map[string]any{
		"global_metrics": map[string]any{
			"state":                   map[bool]string{true: "Paused", false: "Running"}[s.status == "Paused"],
			"incarnation_uuid":        s.incarnation,
			"total_processed_records": s.processed,
			// controller.rs, CircuitThread::step, stores step+1 in
			// total_initiated_steps before the step takes its input: a
			// count that includes the step in progress, as the circuit's
			// step count does here (circuit.beginStep). A checkpoint of
			// n steps holds steps 0..n (stats.rs, checkpoint_notifier).
			"total_initiated_steps":  s.c.Steps,
			"transaction_status":     txnStatus,
			"transaction_id":         txnID,
			"transaction_msecs":      msecs,
			"transaction_records":    records,
			"commit_progress":        progress,
			"transaction_initiators": s.c.TxnInitiators(),
		},
		"inputs":                      s.inputStats(),
		"outputs":                     outputs,
		"checkpoint_activity":         activity,
		"permanent_checkpoint_errors": s.permErrors, // null when none, as Feldera's None
	})
}

func (s *Server) postCheckpoint(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ft.Model() == "none" || s.cfg.NoCheckpoints {
		writeError(w, http.StatusNotImplemented, "EnterpriseFeature",
			"Cannot invoke checkpoint: this feature is only available in the Enterprise edition of Feldera", map[string]any{"feature": "checkpoint"})
		return
	}
	s.c.Advance(time.Now())
	if s.c.Busy() || s.c.InTransaction() {
		// Taken between steps, after the transaction that runs commits
		// (the request is answered at once either way).
		s.deferredCheckpoint = true
		s.ckptRequests++
		writeJSON(w, 200, map[string]any{"checkpoint_sequence_number": s.ckptSeq + 1, "incarnation_uuid": s.incarnation})
		return
	}
	s.checkpointLocked(time.Now())
	s.ckptRequests++
	writeJSON(w, 200, map[string]any{"checkpoint_sequence_number": s.ckptSeq, "incarnation_uuid": s.incarnation})
}

func (s *Server) checkpointStatus(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := r.URL.Query().Get("incarnation_uuid"); u != "" && u != s.incarnation {
		writeError(w, http.StatusBadRequest, "IncarnationUuidMismatch",
			fmt.Sprintf("The incarnation UUID %s does not match the pipeline's incarnation %s", u, s.incarnation), nil)
		return
	}
	var success any
	if s.ckptSuccess > 0 {
		success = s.ckptSuccess
	}
	var failure any
	if s.ckptFailure != nil {
		failure = s.ckptFailure
	}
	writeJSON(w, 200, map[string]any{"success": success, "failure": failure})
}

func (s *Server) listCheckpoints(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]feldera.Checkpoint, 0, len(s.checkpoints))
	for _, cp := range s.checkpoints {
		out = append(out, cp.meta)
	}
	writeJSON(w, 200, out)
}

package felderatest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
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

// checkpoint is one checkpoint the double took: the tables as they were.
type checkpoint struct {
	meta   feldera.Checkpoint
	tables map[string]tableState
}

type tableState struct {
	rows  map[string][]json.RawMessage
	count map[string]int
}

func (t *table) save() tableState {
	st := tableState{rows: make(map[string][]json.RawMessage, len(t.rows)), count: make(map[string]int, len(t.count))}
	for k, v := range t.rows { // stored rows are never mutated in place
		st.rows[k] = v
	}
	for k, v := range t.count {
		st.count[k] = v
	}
	return st
}

func (t *table) restore(st tableState) {
	t.rows, t.count = st.rows, st.count
}

// model is the fault-tolerance model the double runs with, read with its
// own parser (not the client's).
func (s *Server) model() string {
	if s.cfg.FaultTolerance == "" {
		if s.cfg.FaultTolerant {
			return "at_least_once"
		}
		return "none"
	}
	if !s.faultTolerant() {
		return "none"
	}
	var v map[string]any
	if json.Unmarshal([]byte(s.cfg.FaultTolerance), &v) == nil {
		if m, _ := v["model"].(string); m == "at_least_once" {
			return "at_least_once"
		}
	}
	return "exactly_once"
}

// Checkpoint takes a checkpoint now, as the periodic timer would: it
// covers every step run so far. It fails without fault tolerance or with
// Config.NoCheckpoints (Feldera's OSS edition).
func (s *Server) Checkpoint() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.model() == "none" || s.cfg.NoCheckpoints {
		return fmt.Errorf("felderatest: this pipeline cannot checkpoint")
	}
	s.checkpointLocked(time.Now())
	return nil
}

func (s *Server) checkpointLocked(now time.Time) {
	s.ckptSeq++
	cp := checkpoint{meta: feldera.Checkpoint{UUID: newUUID(), Fingerprint: uint64(s.ckptSeq), Steps: s.steps, ProcessedRecords: s.processed}, tables: map[string]tableState{}}
	for name, t := range s.tables {
		cp.tables[name] = t.save()
	}
	s.checkpoints = append(s.checkpoints, cp)
	if len(s.checkpoints) > 5 {
		s.checkpoints = s.checkpoints[len(s.checkpoints)-5:]
	}
	s.lastCheckpoint = now
	s.ckptSuccess = s.ckptSeq
}

// periodic takes the checkpoint Config.CheckpointEvery asks for once its
// time has come (looked at whenever a request arrives: a client polling
// /checkpoints sees them on time).
func (s *Server) periodic(now time.Time) {
	every := s.interval()
	if every <= 0 || s.model() == "none" || s.cfg.NoCheckpoints {
		return
	}
	s.advance(now)
	if s.cur != nil || s.state.phase != txnNone {
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

// interval is Config.CheckpointEvery, else the pipeline's
// checkpoint_interval_secs as Feldera reads it: default 60, clamped to
// 1..3600, null for none.
func (s *Server) interval() time.Duration {
	if s.cfg.CheckpointEvery > 0 {
		return s.cfg.CheckpointEvery
	}
	secs := 60.0
	var v map[string]any
	if json.Unmarshal([]byte(s.cfg.FaultTolerance), &v) == nil {
		if raw, ok := v["checkpoint_interval_secs"]; ok {
			n, isNum := raw.(float64)
			if !isNum {
				return 0 // null: no periodic checkpoints
			}
			secs = min(max(n, 1), 3600)
		}
	}
	return time.Duration(secs * float64(time.Second))
}

// RestartInPlace restarts the pipeline process without a new deployment:
// a new incarnation_uuid, the same deployment_id, old tokens 410, queued
// data lost, and table state as the model keeps it (see above).
func (s *Server) RestartInPlace() {
	s.mu.Lock()
	defer s.mu.Unlock()
	dep := s.deploymentID
	s.newIncarnation()
	s.deploymentID = dep
	switch s.model() {
	case "none":
		for _, t := range s.tables {
			t.clear()
		}
		s.checkpoints = nil
	case "at_least_once":
		for _, t := range s.tables {
			t.clear()
		}
		if n := len(s.checkpoints); n > 0 {
			last := s.checkpoints[n-1]
			for name, st := range last.tables {
				s.tables[name].restore(st)
			}
			s.steps, s.processed = last.meta.Steps, last.meta.ProcessedRecords
			s.checkpoints = s.checkpoints[:n-1]
			s.checkpointLocked(time.Now()) // the restored state, taken again: the list is never empty after a restore
		}
	}
	s.ckptSeq, s.ckptSuccess = 0, 0 // sequence numbers are per process
	s.lastCheckpoint = time.Time{}
}

// RedeployCleared redeploys the pipeline after its storage was cleared: a
// new deployment and incarnation, no checkpoints, empty tables, whatever
// the model.
func (s *Server) RedeployCleared() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.newIncarnation()
	for _, t := range s.tables {
		t.clear()
	}
	s.checkpoints, s.steps, s.processed = nil, 0, 0
	s.ckptSeq, s.ckptSuccess, s.lastCheckpoint = 0, 0, time.Time{}
}

// ChangeProgram redeploys the pipeline with a new program version: a new
// deployment and incarnation, state from the last checkpoint under fault
// tolerance (an exactly_once journal is discarded on a program change),
// nothing without it.
func (s *Server) ChangeProgram() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.programVersion++
	s.newIncarnation()
	if s.model() == "none" {
		for _, t := range s.tables {
			t.clear()
		}
		return
	}
	for _, t := range s.tables {
		t.clear()
	}
	if n := len(s.checkpoints); n > 0 {
		for name, st := range s.checkpoints[n-1].tables {
			s.tables[name].restore(st)
		}
		s.steps = s.checkpoints[n-1].meta.Steps
	}
}

// Steps is how many steps the pipeline has run (its circuit step count).
func (s *Server) Steps() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.steps
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
	s.run(now, !s.cfg.StepsOnPoll || s.init.active() || s.state.phase != txnNone)
	outputs := make([]map[string]any, 0, len(s.cfg.OutputEndpoints))
	for _, name := range s.cfg.OutputEndpoints {
		outputs = append(outputs, map[string]any{"endpoint_name": name, "config": map[string]any{"stream": name}})
	}
	activity := map[string]any{"status": "idle"}
	txnStatus, txnID := s.txnStats()
	msecs, records, progress := s.txnMetrics(now)
	if s.deferredCheckpoint {
		activity = map[string]any{"status": "delayed", "reasons": []string{"TransactionInProgress"}}
	}
	writeJSON(w, 200, map[string]any{
		"global_metrics": map[string]any{
			"state":                   map[bool]string{true: "Paused", false: "Running"}[s.status == "Paused"],
			"incarnation_uuid":        s.incarnation,
			"total_processed_records": s.processed,
			"transaction_status":      txnStatus,
			"transaction_id":          txnID,
			"transaction_msecs":       msecs,
			"transaction_records":     records,
			"commit_progress":         progress,
			"transaction_initiators":  s.txnInitiators(),
		},
		"inputs":              s.inputStats(),
		"outputs":             outputs,
		"checkpoint_activity": activity,
	})
}

func (s *Server) postCheckpoint(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.model() == "none" || s.cfg.NoCheckpoints {
		writeError(w, http.StatusNotImplemented, "EnterpriseFeature",
			"Cannot invoke checkpoint: this feature is only available in the Enterprise edition of Feldera", map[string]any{"feature": "checkpoint"})
		return
	}
	s.advance(time.Now())
	if s.cur != nil || s.state.phase != txnNone {
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
	writeJSON(w, 200, map[string]any{"success": success, "failure": nil})
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

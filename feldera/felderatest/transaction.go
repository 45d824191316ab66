package felderatest

import (
	"fmt"
	"net/http"
	"time"
)

// ---- transactions (DURABILITY.md §1) ----
//
// Feldera keeps two things (controller.rs, TransactionInfo): the
// initiators, who want a transaction (the API, input connectors), with
// the id it will have; and the transaction state the circuit runs
// (circuit.go). POST /start_transaction only records the API as an
// initiator, under the initiators' id or last_transaction_id + 1
// (start_transaction_from_api): it answers at once, even while a commit
// runs, and the transaction starts at the next step that runs, which is
// the next one input triggers. POST /commit_transaction marks the API's
// part committed (start_commit_transaction_from_api); when every
// initiator committed, the next step begins the commit, which feeds no
// input and may take several steps; a commit asked before the
// transaction's first step drops the transaction, and the input it would
// have taken goes to later ordinary steps. Transactions live in the
// process's memory: a restart drops them, their data and the id counter.

// SetCommitDelay makes each API or connector transaction's commit take d
// (on top of Config.CommitPerRecord).
func (s *Server) SetCommitDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commitDelay = d
}

// TransactionConflicts is how many start_transaction requests got 409
// TransactionInProgress.
func (s *Server) TransactionConflicts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txnConflicts
}

// TransactionsCommitted is how many API or connector transactions
// committed with data.
func (s *Server) TransactionsCommitted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txnCommits
}

// TransactionsDropped is how many API transactions were committed before
// their first step, which drops them (their input lands outside).
func (s *Server) TransactionsDropped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txnDropped
}

// txnStats is /stats' transaction_status and transaction_id
// (controller/stats.rs, to_api_type): the running transaction's id
// first, else the one that starts at the next step, else 0.
func (s *Server) txnStats() (status string, id int64) {
	switch s.state.phase {
	case txnStarted:
		return "TransactionInProgress", s.state.tid
	case txnCommitting:
		return "CommitInProgress", s.state.tid
	}
	return "NoTransaction", s.init.tid
}

// txnMetrics is /stats' transaction_msecs, transaction_records and
// commit_progress: null without a transaction; the time in the current
// phase, the records fed to the transaction, and, while it commits, how
// far the commit got (Feldera counts operators; the double counts
// hundredths of the commit's work).
func (s *Server) txnMetrics(now time.Time) (msecs, records, progress any) {
	st := &s.state
	if st.phase == txnNone {
		return nil, nil, nil
	}
	msecs = now.Sub(st.since).Milliseconds()
	records = st.records
	if st.phase == txnCommitting && !st.auto {
		done := 100
		if st.commitWork > 0 {
			done = int(100 * (st.commitWork - st.commitLeft) / st.commitWork)
		}
		inProgress := 0
		if done < 100 {
			inProgress = 1
		}
		progress = map[string]any{
			"completed": done, "in_progress": inProgress, "remaining": 100 - done - inProgress,
			"in_progress_processed_records": (st.commitWork - st.commitLeft).Milliseconds(),
			"in_progress_total_records":     st.commitWork.Milliseconds(),
		}
	}
	return msecs, records, progress
}

func (s *Server) startTransaction(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(time.Now())
	// start_transaction_from_api: only a transaction the API itself
	// already holds (started, or committed but not yet committing) is a
	// conflict; a connector's is joined, a running commit is waited for.
	if s.init.api != 0 {
		s.txnConflicts++
		writeError(w, http.StatusConflict, "TransactionInProgress", "Cannot perform this operation while there is a transaction in progress", nil)
		return
	}
	if s.init.tid == 0 {
		s.lastTID++
		s.init.tid = s.lastTID
	}
	s.init.api = phaseStarted
	writeJSON(w, 200, map[string]any{"transaction_id": s.init.tid})
}

func (s *Server) commitTransaction(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advance(now)
	if s.init.api != phaseStarted {
		writeError(w, http.StatusBadRequest, "NoTransactionInProgress", "This operation requires an active transaction, but none is currently in progress", nil)
		return
	}
	s.init.api = phaseCommitted
	s.askCommit(now)
	writeJSON(w, 200, "Transaction commit initiated")
}

// askCommit follows an initiator's commit: when every initiator committed
// before the transaction started, it is dropped (the step that would have
// started it never ran: start_commit_transaction_from_api); otherwise the
// next step begins the commit.
func (s *Server) askCommit(now time.Time) {
	if !s.init.readyToCommit() {
		return
	}
	if s.state.phase != txnStarted {
		if s.init.api != 0 {
			s.txnDropped++
		}
		s.init.clear()
		return
	}
	s.state.commitFrom = now
	s.advance(now)
}

// StartConnectorTransaction makes the input connector endpoint start (or
// join) a transaction, as Delta's transaction_mode does
// (start_transaction_from_connector): refused while a commit runs; the
// API joins it silently, and it commits only after
// CommitConnectorTransaction for every connector in it and the API's
// commit, if the API joined.
func (s *Server) StartConnectorTransaction(endpoint string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(time.Now())
	if s.state.phase == txnCommitting {
		return fmt.Errorf("felderatest: connector %s cannot start a transaction during a commit", endpoint)
	}
	if _, ok := s.init.connectors[endpoint]; ok {
		return fmt.Errorf("felderatest: connector %s already holds a transaction", endpoint)
	}
	if s.init.tid == 0 {
		s.lastTID++
		s.init.tid = s.lastTID
	}
	if s.init.connectors == nil {
		s.init.connectors = map[string]int{}
	}
	s.init.connectors[endpoint] = phaseStarted
	return nil
}

// CommitConnectorTransaction is the connector's side of the commit
// (commit_transaction_from_connector).
func (s *Server) CommitConnectorTransaction(endpoint string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advance(now)
	if s.init.connectors[endpoint] != phaseStarted {
		return fmt.Errorf("felderatest: connector %s holds no transaction", endpoint)
	}
	s.init.connectors[endpoint] = phaseCommitted
	s.askCommit(now)
	return nil
}

// OpenTransaction reports the id of the transaction that is open,
// committing or pending (initiated, not yet started), 0 when there is
// none: a test's check that nothing was left open. An automatic step's
// transaction is not one.
func (s *Server) OpenTransaction() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(time.Now())
	if s.state.phase != txnNone && !s.state.auto {
		return s.state.tid
	}
	return s.init.tid
}

// txnInitiators is /stats global_metrics.transaction_initiators
// (TransactionInitiators::to_api_type).
func (s *Server) txnInitiators() map[string]any {
	out := map[string]any{"transaction_id": nil, "initiated_by_api": nil, "initiated_by_connectors": map[string]any{}}
	if s.init.tid != 0 {
		out["transaction_id"] = s.init.tid
	}
	switch s.init.api {
	case phaseStarted:
		out["initiated_by_api"] = "Started"
	case phaseCommitted:
		out["initiated_by_api"] = "Committed"
	}
	conns := map[string]any{}
	for name, p := range s.init.connectors {
		phase := "Started"
		if p == phaseCommitted {
			phase = "Committed"
		}
		conns[name] = map[string]any{"phase": phase, "label": nil}
	}
	out["initiated_by_connectors"] = conns
	return out
}

// inputStats is /stats inputs: each HTTP ingress endpoint and the records
// and bytes it holds that no step took yet.
func (s *Server) inputStats() []any {
	out := make([]any, 0, len(s.endpoints))
	for _, ep := range s.endpoints {
		records, bytes := s.buffered(ep)
		out = append(out, map[string]any{
			"endpoint_name": ep.name,
			"metrics":       map[string]any{"buffered_records": records, "buffered_bytes": bytes},
		})
	}
	return out
}

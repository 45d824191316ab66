package felderatest

import (
	"net/http"
	"time"
)

// ---- transactions (DURABILITY.md §1) ----
//
// The model is the circuit's (internal/circuit, transaction.go); here are
// its HTTP endpoints and the test's handles on it.

// SetCommitDelay makes each API or connector transaction's commit take d
// (on top of Config.CommitPerRecord).
func (s *Server) SetCommitDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.CommitDelay = d
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
	return s.c.TxnDropped
}

func (s *Server) startTransaction(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Advance(time.Now())
	tid, ok := s.c.StartAPI()
	if !ok {
		s.txnConflicts++
		writeError(w, http.StatusConflict, "TransactionInProgress", "Cannot perform this operation while there is a transaction in progress", nil)
		return
	}
	writeJSON(w, 200, map[string]any{"transaction_id": tid})
}

func (s *Server) commitTransaction(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.c.Advance(now)
	if !s.c.CommitAPI(now) {
		writeError(w, http.StatusBadRequest, "NoTransactionInProgress", "This operation requires an active transaction, but none is currently in progress", nil)
		return
	}
	writeJSON(w, 200, "Transaction commit initiated")
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
	s.c.Advance(time.Now())
	return s.c.StartConnector(endpoint)
}

// CommitConnectorTransaction is the connector's side of the commit
// (commit_transaction_from_connector).
func (s *Server) CommitConnectorTransaction(endpoint string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.c.Advance(now)
	return s.c.CommitConnector(endpoint, now)
}

// OpenTransaction reports the id of the transaction that is open,
// committing or pending (initiated, not yet started), 0 when there is
// none: a test's check that nothing was left open. An automatic step's
// transaction is not one.
func (s *Server) OpenTransaction() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Advance(time.Now())
	return s.c.Open()
}

// inputStats is /stats inputs: each HTTP ingress endpoint, the records
// and bytes it holds that no step took yet, and the records it took since
// this pipeline process created it: total_records grows as each parsed
// piece of a body is queued, so a request cut short counts what Feldera
// kept of it (controller/stats.rs, InputEndpointMetrics::total_records,
// incremented by add_buffered from input_batch_from_endpoint). A restart
// starts every endpoint again from 0 (newIncarnation).
func (s *Server) inputStats() []any {
	out := make([]any, 0, len(s.endpoints))
	for _, ep := range s.endpoints {
		records, bytes := s.c.Buffered(ep)
		out = append(out, map[string]any{
			"endpoint_name": ep.Name,
			"metrics":       map[string]any{"buffered_records": records, "buffered_bytes": bytes, "total_records": ep.Queued},
		})
	}
	return out
}

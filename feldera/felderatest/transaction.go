package felderatest

import (
	"fmt"
	"net/http"
	"time"
)

// ---- transactions (DURABILITY.md §1) ----
//
// One API transaction at a time, pipeline-wide. While it is open, steps
// still take queued input (it is "indexed"), but nothing becomes visible
// and no token completes: the data waits in the transaction. A commit only
// starts on POST /commit_transaction; it takes SetCommitDelay, feeds no
// input meanwhile, and then makes everything visible in one state, at one
// step. /stats shows transaction_status and transaction_id the way Feldera
// does. A restart drops an open transaction and its data.
//
// Transactions started by connectors (Delta, Iceberg transaction_mode)
// are modelled by StartConnectorTransaction: the API joins them, and the
// commit waits for every participant. Not modelled: exactly_once's replay of the journaled part of an open transaction
// (Feldera then commits that part; the double drops it, as without fault
// tolerance).

type txnPhase int

const (
	txnStarted txnPhase = iota
	txnCommitting
)

type apiTxn struct {
	id        int64
	phase     txnPhase
	stepped   bool      // a step ran since start: /stats shows it in progress
	commitAt  time.Time // committing: when the commit finishes
	batches   []*batch  // input its steps took: applied at commit
	commitAsk bool      // a pending next transaction whose commit was already asked
	api       bool      // the API holds it and has not asked for its commit
	apiDone   bool      // the API asked for its commit: a new start is a 409 until it begins
	// connectors are the input connectors (Delta, Iceberg transaction_mode)
	// that started or joined it and have not committed: it commits only
	// once the API and every one of them did.
	connectors map[string]bool
}

// SetCommitDelay makes each transaction commit take d (default 0).
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

// TransactionsCommitted is how many API transactions committed with data.
func (s *Server) TransactionsCommitted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txnCommits
}

// inTxn reports whether input is going into an open transaction now.
func (s *Server) inTxn() bool { return s.txn != nil && s.txn.phase == txnStarted }

// committing reports whether a commit runs (no input is fed meanwhile).
func (s *Server) committing() bool { return s.txn != nil && s.txn.phase == txnCommitting }

// finishCommit ends a commit whose time has come: every batch of the
// transaction is applied at once, at one step, and becomes one visible
// state; the API's next transaction, if it asked for one, begins.
func (s *Server) finishCommit(now time.Time) {
	if !s.committing() || now.Before(s.txn.commitAt) {
		return
	}
	s.steps++
	for _, b := range s.txn.batches {
		s.applyBatch(b)
	}
	s.txnCommits++
	s.txn, s.nextTxn = s.nextTxn, nil
	s.exposed()
	if s.txn != nil && s.txn.commitAsk {
		s.beginCommit(s.txn, now)
	}
	if s.deferredCheckpoint && s.txn == nil {
		s.deferredCheckpoint = false
		s.checkpointLocked(now) // checkpoints wait for transactions
	}
}

func (s *Server) beginCommit(t *apiTxn, now time.Time) {
	if !t.stepped {
		// Nothing executed a step since start: the commit just drops it.
		s.txn = s.nextTxn
		s.nextTxn = nil
		return
	}
	t.phase = txnCommitting
	t.commitAt = now.Add(s.commitDelay)
}

// txnStats is /stats' view of the transaction.
func (s *Server) txnStats() (status string, id int64) {
	switch {
	case s.txn == nil:
		return "NoTransaction", 0
	case s.txn.phase == txnCommitting:
		return "CommitInProgress", s.txn.id
	case s.txn.stepped:
		return "TransactionInProgress", s.txn.id
	}
	// Right after start_transaction, before any step: the pending ID, and
	// the status stays NoTransaction until the next step.
	return "NoTransaction", s.txn.id
}

func (s *Server) startTransaction(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advance(now)
	switch {
	case s.inTxn() && !s.txn.api && !s.txn.apiDone && s.nextTxn == nil:
		// A connector's transaction: the API joins it, no conflict.
		s.txn.api = true
		writeJSON(w, 200, map[string]any{"transaction_id": s.txn.id})
		return
	case s.inTxn() || s.nextTxn != nil:
		s.txnConflicts++
		writeError(w, http.StatusConflict, "TransactionInProgress", "Cannot perform this operation while there is a transaction in progress", nil)
		return
	case s.committing():
		// It succeeds with a new ID and begins once the commit finished.
		s.txnIDs++
		s.nextTxn = &apiTxn{id: s.txnIDs, api: true}
		writeJSON(w, 200, map[string]any{"transaction_id": s.nextTxn.id})
		return
	}
	s.txnIDs++
	s.txn = &apiTxn{id: s.txnIDs, api: true}
	writeJSON(w, 200, map[string]any{"transaction_id": s.txn.id})
}

func (s *Server) commitTransaction(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advance(now)
	switch {
	case s.nextTxn != nil && !s.nextTxn.commitAsk:
		s.nextTxn.commitAsk = true // it commits as soon as it begins
	case s.inTxn() && s.txn.api:
		s.txn.api, s.txn.apiDone = false, true
		if len(s.txn.connectors) == 0 {
			s.beginCommit(s.txn, now)
			s.advance(now)
		}
	default:
		writeError(w, http.StatusBadRequest, "NoTransactionInProgress", "This operation requires an active transaction, but none is currently in progress", nil)
		return
	}
	writeJSON(w, 200, "Transaction commit initiated")
}

// StartConnectorTransaction makes the input connector endpoint start (or
// join) a transaction, as Delta's transaction_mode does: the API joins it
// silently, and it commits only after CommitConnectorTransaction for
// every connector in it and the API's commit, if the API joined.
func (s *Server) StartConnectorTransaction(endpoint string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advance(now)
	switch {
	case s.committing() || s.nextTxn != nil:
		return fmt.Errorf("felderatest: connector %s cannot start a transaction during a commit", endpoint)
	case s.txn == nil:
		s.txnIDs++
		s.txn = &apiTxn{id: s.txnIDs}
	}
	if s.txn.connectors == nil {
		s.txn.connectors = map[string]bool{}
	}
	s.txn.connectors[endpoint] = true
	return nil
}

// CommitConnectorTransaction is the connector's side of the commit.
func (s *Server) CommitConnectorTransaction(endpoint string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advance(now)
	if !s.inTxn() || !s.txn.connectors[endpoint] {
		return fmt.Errorf("felderatest: connector %s holds no transaction", endpoint)
	}
	delete(s.txn.connectors, endpoint)
	if len(s.txn.connectors) == 0 && !s.txn.api {
		s.beginCommit(s.txn, now)
		s.advance(now)
	}
	return nil
}

// OpenTransaction reports the ID of the transaction open or committing,
// 0 when there is none: a test's check that nothing was left open.
func (s *Server) OpenTransaction() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(time.Now())
	if s.txn == nil {
		return 0
	}
	return s.txn.id
}

// txnInitiators is /stats global_metrics.transaction_initiators.
func (s *Server) txnInitiators() map[string]any {
	out := map[string]any{"transaction_id": nil, "initiated_by_api": nil, "initiated_by_connectors": map[string]any{}}
	t := s.txn
	if s.nextTxn != nil {
		t = s.nextTxn
	}
	if t == nil || t.phase == txnCommitting {
		return out
	}
	out["transaction_id"] = t.id
	switch {
	case t.api:
		out["initiated_by_api"] = "Started"
	case t.apiDone:
		out["initiated_by_api"] = "Committed"
	}
	conns := map[string]any{}
	for name := range t.connectors {
		conns[name] = map[string]any{"phase": "Started", "label": nil}
	}
	out["initiated_by_connectors"] = conns
	return out
}

// inputStats is /stats inputs: each HTTP ingress endpoint and the records
// it holds that no step took yet.
func (s *Server) inputStats() []any {
	buffered := map[*endpoint]int{}
	for _, b := range s.queue {
		buffered[b.ep] += b.rows
	}
	out := make([]any, 0, len(s.endpoints))
	for _, ep := range s.endpoints {
		out = append(out, map[string]any{
			"endpoint_name": ep.name,
			"metrics":       map[string]any{"buffered_records": buffered[ep]},
		})
	}
	return out
}

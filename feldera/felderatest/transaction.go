package felderatest

import (
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
// Not modelled: transactions started by connectors (Delta, Iceberg), and
// exactly_once's replay of the journaled part of an open transaction
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
}

// SetCommitDelay makes each transaction commit take d (default 0).
func (s *Server) SetCommitDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commitDelay = d
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
	case s.inTxn() || s.nextTxn != nil:
		writeError(w, http.StatusConflict, "TransactionInProgress", "Cannot perform this operation while there is a transaction in progress", nil)
		return
	case s.committing():
		// It succeeds with a new ID and begins once the commit finished.
		s.txnIDs++
		s.nextTxn = &apiTxn{id: s.txnIDs}
		writeJSON(w, 200, map[string]any{"transaction_id": s.nextTxn.id})
		return
	}
	s.txnIDs++
	s.txn = &apiTxn{id: s.txnIDs}
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
	case s.inTxn():
		s.beginCommit(s.txn, now)
		s.advance(now)
	default:
		writeError(w, http.StatusBadRequest, "NoTransactionInProgress", "This operation requires an active transaction, but none is currently in progress", nil)
		return
	}
	writeJSON(w, 200, "Transaction commit initiated")
}

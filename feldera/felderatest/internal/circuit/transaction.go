package circuit

import (
	"fmt"
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

// InTransaction reports whether the circuit runs a transaction (an
// automatic one included).
func (c *Circuit) InTransaction() bool { return c.state.phase != txnNone }

// Initiated reports whether someone started a transaction, committed or
// not (is_active).
func (c *Circuit) Initiated() bool { return c.init.active() }

// StartAPI records the API as an initiator, under the initiators' id or
// last_transaction_id + 1, and returns the id; ok is false when the API
// holds a transaction already.
func (c *Circuit) StartAPI() (tid int64, ok bool) {
	// start_transaction_from_api: only a transaction the API itself
	// already holds (started, or committed but not yet committing) is a
	// conflict; a connector's is joined, a running commit is waited for.
	if c.init.api != 0 {
		return 0, false
	}
	if c.init.tid == 0 {
		c.lastTID++
		c.init.tid = c.lastTID
	}
	c.init.api = phaseStarted
	return c.init.tid, true
}

// CommitAPI marks the API's part committed; ok is false when the API
// holds no started transaction.
func (c *Circuit) CommitAPI(now time.Time) (ok bool) {
	if c.init.api != phaseStarted {
		return false
	}
	c.init.api = phaseCommitted
	c.askCommit(now)
	return true
}

// askCommit follows an initiator's commit: when every initiator committed
// before the transaction started, it is dropped (the step that would have
// started it never ran: start_commit_transaction_from_api); otherwise the
// next step begins the commit.
func (c *Circuit) askCommit(now time.Time) {
	if !c.init.readyToCommit() {
		return
	}
	if c.state.phase != txnStarted {
		if c.init.api != 0 {
			c.TxnDropped++
		}
		c.init.clear()
		return
	}
	c.state.commitFrom = now
	c.Advance(now)
}

// StartConnector makes the input connector endpoint start (or join) a
// transaction (felderatest.Server.StartConnectorTransaction).
func (c *Circuit) StartConnector(endpoint string) error {
	if c.state.phase == txnCommitting {
		return fmt.Errorf("felderatest: connector %s cannot start a transaction during a commit", endpoint)
	}
	if _, ok := c.init.connectors[endpoint]; ok {
		return fmt.Errorf("felderatest: connector %s already holds a transaction", endpoint)
	}
	if c.init.tid == 0 {
		c.lastTID++
		c.init.tid = c.lastTID
	}
	if c.init.connectors == nil {
		c.init.connectors = map[string]int{}
	}
	c.init.connectors[endpoint] = phaseStarted
	return nil
}

// CommitConnector is the connector's side of the commit
// (commit_transaction_from_connector).
func (c *Circuit) CommitConnector(endpoint string, now time.Time) error {
	if c.init.connectors[endpoint] != phaseStarted {
		return fmt.Errorf("felderatest: connector %s holds no transaction", endpoint)
	}
	c.init.connectors[endpoint] = phaseCommitted
	c.askCommit(now)
	return nil
}

// Open is the id of the transaction that is open, committing or pending
// (initiated, not yet started), 0 when there is none; an automatic step's
// transaction is not one.
func (c *Circuit) Open() int64 {
	if c.state.phase != txnNone && !c.state.auto {
		return c.state.tid
	}
	return c.init.tid
}

// TxnStats is /stats' transaction_status and transaction_id
// (controller/stats.rs, to_api_type): the running transaction's id
// first, else the one that starts at the next step, else 0.
func (c *Circuit) TxnStats() (status string, id int64) {
	switch c.state.phase {
	case txnStarted:
		return "TransactionInProgress", c.state.tid
	case txnCommitting:
		return "CommitInProgress", c.state.tid
	}
	return "NoTransaction", c.init.tid
}

// TxnMetrics is /stats' transaction_msecs, transaction_records and
// commit_progress: null without a transaction; the time in the current
// phase, the records fed to the transaction, and, while it commits, how
// far the commit got (Feldera counts operators; the double counts
// hundredths of the commit's work).
func (c *Circuit) TxnMetrics(now time.Time) (msecs, records, progress any) {
	st := &c.state
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

// TxnInitiators is /stats global_metrics.transaction_initiators
// (TransactionInitiators::to_api_type).
func (c *Circuit) TxnInitiators() map[string]any {
	out := map[string]any{"transaction_id": nil, "initiated_by_api": nil, "initiated_by_connectors": map[string]any{}}
	if c.init.tid != 0 {
		out["transaction_id"] = c.init.tid
	}
	switch c.init.api {
	case phaseStarted:
		out["initiated_by_api"] = "Started"
	case phaseCommitted:
		out["initiated_by_api"] = "Committed"
	}
	conns := map[string]any{}
	for name, p := range c.init.connectors {
		phase := "Started"
		if p == phaseCommitted {
			phase = "Committed"
		}
		conns[name] = map[string]any{"phase": phase, "label": nil}
	}
	out["initiated_by_connectors"] = conns
	return out
}

// Package txnview reads what Feldera's /stats says of a transaction the
// connector holds (Of), whether one was opened in a restarted process
// (OpenedAfterRestart), and what a wait on Feldera watches for progress
// (Mark): rules without I/O, for delivery.Transactions.
package txnview

import (
	"strings"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// Poll is the /stats schedule of delivery.Transactions' waits.
func Poll(n int) time.Duration {
	return min(time.Duration(1<<min(n, 5))*time.Millisecond, 25*time.Millisecond)
}

// State is what /stats says of a transaction this connector holds.
type State int

const (
	Gone       State = iota // nothing names it: committed, or dropped
	Pending                 // initiated by the API; it starts at the next step (after a commit that runs)
	Taking                  // it runs: its steps take input
	Committing              // its commit runs, or was asked and begins at the next step
	Restarted               // the pipeline restarted: it is gone with its process
)

func (v State) String() string {
	return [...]string{"gone", "pending", "taking input", "committing", "restarted"}[v]
}

// Of reads a transaction's state from /stats: the running
// transaction's id and status first (controller/stats.rs: the circuit's
// transaction_state), then the initiators (who want one, and the id it
// will have). During an automatic step transaction_id names that step's
// transaction, never ours, so "not the running one" is not "gone":
// ours is gone only when no initiator names it either. incarnation is the
// pipeline process it was opened in ("" when unknown).
func Of(g feldera.GlobalMetrics, id int64, incarnation string) State {
	if incarnation != "" && g.IncarnationUUID != incarnation {
		return Restarted
	}
	in := g.TransactionInitiators
	named := in != nil && in.TransactionID != nil && *in.TransactionID == id
	api := ""
	if named && in.InitiatedByAPI != nil {
		api = *in.InitiatedByAPI
	}
	switch {
	case g.TransactionID == id && g.TransactionStatus == "TransactionInProgress":
		return Taking
	case g.TransactionID == id && g.TransactionStatus == "CommitInProgress":
		return Committing
	case api == "Committed":
		return Committing
	case api == "Started" || named && len(in.InitiatedByConnectors) > 0:
		return Pending
	case in == nil && g.TransactionID == id && g.TransactionStatus == "NoTransaction":
		return Pending // a Feldera without initiators shows the pending id
	}
	return Gone
}

// OpenedAfterRestart reports whether the pipeline process /stats
// describes holds an API transaction under id that has not committed: a
// start_transaction of ours that reached a process which restarted after
// the session learnt its incarnation. A restart resets the transaction
// ids (controller.rs: last_transaction_id lives in the process), and ours
// count from 1 again there, so another client's transaction under the
// same id needs a second writer of the pipeline's API transaction.
func OpenedAfterRestart(g feldera.GlobalMetrics, id int64) bool {
	in := g.TransactionInitiators
	if id == 0 || in == nil || in.TransactionID == nil || *in.TransactionID != id || in.InitiatedByAPI == nil {
		return false
	}
	return *in.InitiatedByAPI == "Started"
}

// Mark is what a wait on Feldera watches: while it changes,
// Feldera is working (steps process input, a commit advances, our
// buffered records are taken), and the wait goes on.
type Mark struct {
	txnID     int64
	status    string
	processed uint64
	commit    string
	buffered  uint64
}

func MarkOf(st *feldera.Stats, tables map[string]bool) Mark {
	g := st.GlobalMetrics
	return Mark{txnID: g.TransactionID, status: g.TransactionStatus, processed: g.TotalProcessedRecords,
		commit: string(g.CommitProgress), buffered: st.IngressBuffered(tables)}
}

// WaitingFor names the input connectors a commit waits for, if any.
func WaitingFor(st *feldera.Stats) string {
	in := st.GlobalMetrics.TransactionInitiators
	if in == nil || len(in.InitiatedByConnectors) == 0 {
		return ""
	}
	names := make([]string, 0, len(in.InitiatedByConnectors))
	for n := range in.InitiatedByConnectors {
		names = append(names, n)
	}
	return ", waiting for input connectors " + strings.Join(names, ",")
}

package delivery

// Feldera transactions (FELDERA_TRANSACTIONS; DURABILITY.md §1). Feldera
// feeds a request body to its steps as it arrives, in chunks, and a step
// takes at most a per-endpoint cap of records: one POST can land over
// several steps, and a view can see a prefix of it. A source transaction
// with more than one record is atomic in Feldera only inside a Feldera
// transaction: everything fed between start_transaction and the commit
// becomes visible at once, at the commit.
//
// A flush is wrapped (auto) when it holds more than one table, a source
// transaction with more than one record, or part of a source transaction
// that goes on in the next flush (a transaction larger than the batch
// bound, or cut by the linger deadline): the Feldera transaction then
// stays open across the flushes until the one that ends at a source
// COMMIT. A flush of single-record transactions of one table needs none:
// a record is never split, and any prefix of them is a state the source
// had. The protocol that holds a Feldera transaction open and commits it
// is delivery.Transactions.

// FELDERA_TRANSACTIONS values.
const (
	TxnAuto   = "auto"
	TxnAlways = "always"
	TxnOff    = "off"
)

// TxnPlan is what a batch does about Feldera transactions.
type TxnPlan struct {
	Begin bool // start one before its POSTs
	In    bool // its POSTs go into one
	End   bool // commit it after its POSTs
}

// PlanTxn decides the plan of a batch sealed now: open tells whether a
// Feldera transaction continues from the previous batch, spans whether the
// batch ends inside a source transaction, multi whether it holds a source
// transaction with more than one record.
func PlanTxn(mode string, open, spans, multi bool, tables int) TxnPlan {
	var wrap bool
	switch mode {
	case TxnOff:
		return TxnPlan{}
	case TxnAlways:
		wrap = true
	default:
		wrap = open || spans || multi || tables > 1
	}
	if !wrap {
		return TxnPlan{}
	}
	return TxnPlan{Begin: !open, In: true, End: !spans}
}

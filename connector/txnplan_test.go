package connector

import "testing"

// Every combination of mode, an open Feldera transaction, a batch that
// ends inside a source transaction, and its table count.
func TestPlanTxn(t *testing.T) {
	for _, mode := range []string{TxnAuto, TxnAlways, TxnOff} {
		for _, open := range []bool{false, true} {
			for _, spans := range []bool{false, true} {
				for _, tables := range []int{0, 1, 2, 5} {
					got := planTxn(mode, open, spans, tables)
					var want txnPlan
					switch {
					case mode == TxnOff:
					case mode == TxnAlways || open || spans || tables > 1:
						want = txnPlan{begin: !open, in: true, end: !spans}
					}
					if got != want {
						t.Errorf("planTxn(%s, open=%v, spans=%v, tables=%d) = %+v, want %+v", mode, open, spans, tables, got, want)
					}
					// Invariants the stream relies on: a transaction is
					// begun only when none is open, and one left open is
					// always continued (never a POST outside it while open).
					if got.begin && open {
						t.Errorf("%s/%v/%v/%d: begins while one is open", mode, open, spans, tables)
					}
					if open && mode != TxnOff && !got.in {
						t.Errorf("%s/%v/%v/%d: posts outside the open transaction", mode, open, spans, tables)
					}
					if got.in && !got.end && !spans {
						t.Errorf("%s/%v/%v/%d: leaves a transaction open after whole source transactions", mode, open, spans, tables)
					}
				}
			}
		}
	}
	// auto leaves a single-table flush of whole transactions alone.
	if p := planTxn(TxnAuto, false, false, 1); p.in {
		t.Errorf("auto wraps a single-table flush of whole transactions: %+v", p)
	}
}

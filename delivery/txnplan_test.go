package delivery

import "testing"

// The plan of a batch, case by case: written out, not recomputed from the
// rule, so a changed rule shows as a changed row.
func TestPlanTxn(t *testing.T) {
	none := TxnPlan{}
	whole := TxnPlan{Begin: true, In: true, End: true} // begin, post, commit
	first := TxnPlan{Begin: true, In: true}            // begin, post, leave open
	middle := TxnPlan{In: true}                        // post into the open one
	last := TxnPlan{In: true, End: true}               // post, commit
	for _, tc := range []struct {
		mode               string
		open, spans, multi bool
		tables             int
		want               TxnPlan
	}{
		// auto: single-record transactions of one table go alone...
		{TxnAuto, false, false, false, 1, none},
		{TxnAuto, false, false, false, 0, none},
		// ...anything else is wrapped.
		{TxnAuto, false, false, true, 1, whole},  // a multi-record transaction
		{TxnAuto, false, false, false, 2, whole}, // several tables
		{TxnAuto, false, false, true, 5, whole},  //
		{TxnAuto, false, true, false, 1, first},  // ends inside a source transaction
		{TxnAuto, false, true, true, 2, first},   //
		{TxnAuto, true, true, false, 1, middle},  // continues one, still inside
		{TxnAuto, true, false, false, 1, last},   // continues one, ends at its COMMIT
		{TxnAuto, true, false, false, 0, last},   // an empty batch that only commits
		{TxnAlways, false, false, false, 1, whole},
		{TxnAlways, false, false, false, 0, whole},
		{TxnAlways, false, true, false, 1, first},
		{TxnAlways, true, true, false, 3, middle},
		{TxnAlways, true, false, true, 1, last},
		{TxnOff, false, false, true, 2, none},
		{TxnOff, false, true, true, 5, none},
		{TxnOff, true, true, false, 1, none},
	} {
		if got := PlanTxn(tc.mode, tc.open, tc.spans, tc.multi, tc.tables); got != tc.want {
			t.Errorf("PlanTxn(%s, open=%v, spans=%v, multi=%v, tables=%d) = %+v, want %+v", tc.mode, tc.open, tc.spans, tc.multi, tc.tables, got, tc.want)
		}
	}
}

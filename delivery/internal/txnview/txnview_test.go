package txnview

import (
	"encoding/json"
	"testing"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// What /stats says of transaction 5 (opened in incarnation "a"), in every
// shape Feldera shows it: running its steps or its commit, pending behind
// an automatic step's commit (transaction_id names that step's
// transaction, 4 or 6, never ours), asked to commit, and gone.
func TestViewTxn(t *testing.T) {
	stats := func(js string) feldera.GlobalMetrics { return globalMetrics(t, js) }
	for _, tc := range []struct {
		name, stats string
		want        State
	}{
		{"running", `{"incarnation_uuid":"a","transaction_status":"TransactionInProgress","transaction_id":5,
			"transaction_initiators":{"transaction_id":5,"initiated_by_api":"Started","initiated_by_connectors":{}}}`, Taking},
		{"pending before any step", `{"incarnation_uuid":"a","transaction_status":"NoTransaction","transaction_id":5,
			"transaction_initiators":{"transaction_id":5,"initiated_by_api":"Started","initiated_by_connectors":{}}}`, Pending},
		{"pending behind an automatic step", `{"incarnation_uuid":"a","transaction_status":"CommitInProgress","transaction_id":4,
			"transaction_initiators":{"transaction_id":5,"initiated_by_api":"Started","initiated_by_connectors":{}}}`, Pending},
		{"pending behind another's commit, joined by a connector", `{"incarnation_uuid":"a","transaction_status":"CommitInProgress","transaction_id":3,
			"transaction_initiators":{"transaction_id":5,"initiated_by_api":null,"initiated_by_connectors":{"delta":{"phase":"Started","label":null}}}}`, Pending},
		{"commit asked, not begun", `{"incarnation_uuid":"a","transaction_status":"TransactionInProgress","transaction_id":5,
			"transaction_initiators":{"transaction_id":5,"initiated_by_api":"Committed","initiated_by_connectors":{}}}`, Taking},
		{"commit asked while pending", `{"incarnation_uuid":"a","transaction_status":"CommitInProgress","transaction_id":4,
			"transaction_initiators":{"transaction_id":5,"initiated_by_api":"Committed","initiated_by_connectors":{}}}`, Committing},
		{"committing", `{"incarnation_uuid":"a","transaction_status":"CommitInProgress","transaction_id":5,
			"transaction_initiators":{"transaction_id":null,"initiated_by_api":null,"initiated_by_connectors":{}}}`, Committing},
		{"committed, an automatic step runs", `{"incarnation_uuid":"a","transaction_status":"CommitInProgress","transaction_id":6,
			"transaction_initiators":{"transaction_id":null,"initiated_by_api":null,"initiated_by_connectors":{}}}`, Gone},
		{"committed, idle", `{"incarnation_uuid":"a","transaction_status":"NoTransaction","transaction_id":0,
			"transaction_initiators":{"transaction_id":null,"initiated_by_api":null,"initiated_by_connectors":{}}}`, Gone},
		{"another client's", `{"incarnation_uuid":"a","transaction_status":"TransactionInProgress","transaction_id":7,
			"transaction_initiators":{"transaction_id":7,"initiated_by_api":"Started","initiated_by_connectors":{}}}`, Gone},
		{"a Feldera without initiators, pending", `{"incarnation_uuid":"a","transaction_status":"NoTransaction","transaction_id":5}`, Pending},
		{"restarted", `{"incarnation_uuid":"b","transaction_status":"TransactionInProgress","transaction_id":5,
			"transaction_initiators":{"transaction_id":5,"initiated_by_api":"Started","initiated_by_connectors":{}}}`, Restarted},
	} {
		if got := Of(stats(tc.stats), 5, "a"); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	// An unknown incarnation (a start whose answer was lost) is not a restart.
	if got := Of(stats(`{"incarnation_uuid":"b","transaction_status":"TransactionInProgress","transaction_id":5}`), 5, ""); got != Taking {
		t.Errorf("unknown incarnation: %s", got)
	}
}

// A transaction a start of ours opened in a process that restarted after
// the session learnt its incarnation: the new process names it as the
// API's, under the id the start returned. Anything else is not ours.
func TestOpenedAfterRestart(t *testing.T) {
	stats := func(js string) feldera.GlobalMetrics { return globalMetrics(t, js) }
	for _, tc := range []struct {
		name, stats string
		id          int64
		want        bool
	}{
		{"started under its id", `{"incarnation_uuid":"b","transaction_status":"TransactionInProgress","transaction_id":1,
			"transaction_initiators":{"transaction_id":1,"initiated_by_api":"Started","initiated_by_connectors":{}}}`, 1, true},
		{"pending under its id", `{"incarnation_uuid":"b","transaction_status":"NoTransaction","transaction_id":1,
			"transaction_initiators":{"transaction_id":1,"initiated_by_api":"Started","initiated_by_connectors":{}}}`, 1, true},
		{"another id", `{"incarnation_uuid":"b","transaction_status":"TransactionInProgress","transaction_id":2,
			"transaction_initiators":{"transaction_id":2,"initiated_by_api":"Started","initiated_by_connectors":{}}}`, 1, false},
		{"a connector's", `{"incarnation_uuid":"b","transaction_status":"TransactionInProgress","transaction_id":1,
			"transaction_initiators":{"transaction_id":1,"initiated_by_api":null,"initiated_by_connectors":{"delta":{"phase":"Started","label":null}}}}`, 1, false},
		{"committing", `{"incarnation_uuid":"b","transaction_status":"CommitInProgress","transaction_id":1,
			"transaction_initiators":{"transaction_id":1,"initiated_by_api":"Committed","initiated_by_connectors":{}}}`, 1, false},
		{"none", `{"incarnation_uuid":"b","transaction_status":"NoTransaction","transaction_id":0}`, 1, false},
		{"an id never known", `{"incarnation_uuid":"b","transaction_status":"NoTransaction","transaction_id":0,
			"transaction_initiators":{"transaction_id":0,"initiated_by_api":"Started","initiated_by_connectors":{}}}`, 0, false},
	} {
		if got := OpenedAfterRestart(stats(tc.stats), tc.id); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// globalMetrics parses /stats global_metrics.
func globalMetrics(t *testing.T, js string) feldera.GlobalMetrics {
	var g feldera.GlobalMetrics
	if err := json.Unmarshal([]byte(js), &g); err != nil {
		t.Fatal(err)
	}
	return g
}

package feldera_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

// Every ordinary step is an automatic transaction (controller.rs,
// advance_transaction_state, StartAndCommit): while it runs /stats shows
// CommitInProgress under its own id. A start_transaction meanwhile
// succeeds with the next id, pending in the initiators; the transaction
// starts at the next step input triggers.
func TestSteps_AutomaticTransactions(t *testing.T) {
	_, c := newServer(t, func(cfg *felderatest.Config) { cfg.StepTime = time.Second })
	if _, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`)); err != nil {
		t.Fatal(err)
	}
	st, err := c.Stats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if g := st.GlobalMetrics; g.TransactionStatus != "CommitInProgress" || g.TransactionID != 1 {
		t.Fatalf("during an ordinary step: %s %d, want CommitInProgress 1 (the step's own transaction)", g.TransactionStatus, g.TransactionID)
	}
	id, err := c.StartTransaction(ctx(t))
	if err != nil || id != 2 {
		t.Fatalf("start during the automatic commit: %d %v, want 2", id, err)
	}
	st, _ = c.Stats(ctx(t))
	g := st.GlobalMetrics
	if g.TransactionID != 1 || g.TransactionInitiators == nil || g.TransactionInitiators.TransactionID == nil ||
		*g.TransactionInitiators.TransactionID != 2 || *g.TransactionInitiators.InitiatedByAPI != "Started" {
		t.Fatalf("pending: /stats %+v initiators %+v, want the step's 1 running and 2 initiated by the API", g, g.TransactionInitiators)
	}
	waitStats(t, c, "the automatic step to end", func(g feldera.GlobalMetrics) bool {
		return g.TransactionStatus == "NoTransaction" && g.TransactionID == 2 // pending: no input, no step
	})
	if _, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":2}}`)); err != nil {
		t.Fatal(err)
	}
	waitStats(t, c, "the transaction to start", func(g feldera.GlobalMetrics) bool {
		return g.TransactionStatus == "TransactionInProgress" && g.TransactionID == 2
	})
}

// A request body is fed as it arrives, read by read, each read split at
// record boundaries (http/input.rs, complete_request), and a step takes
// at most a per-endpoint cap: one request lands over several steps, and
// states in between show a prefix of it.
func TestSteps_RequestFedInChunks(t *testing.T) {
	var mu sync.Mutex
	var seen []int
	s, c := newServer(t, func(cfg *felderatest.Config) {
		cfg.StepTime, cfg.ReadBytes, cfg.StepRecords = 5*time.Millisecond, 512, 10
		cfg.OnState = func(v felderatest.View) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, v.Len("users"))
		}
	})
	var body strings.Builder
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&body, `{"insert":{"id":%d,"name":"a row of some length"}}`+"\n", i)
	}
	push(t, c, "users", body.String())
	if n := s.Len("users"); n != 200 {
		t.Fatalf("%d rows after the request completed", n)
	}
	mu.Lock()
	defer mu.Unlock()
	partial := 0
	for _, n := range seen {
		if n > 0 && n < 200 {
			partial++
		}
	}
	if partial == 0 {
		t.Fatalf("states %v: none showed a prefix of the request", seen)
	}
}

// The ingress endpoint is named after the path segment as sent, quotes
// and all (server.rs, input_endpoint), so a quoted table's endpoint is
// "TaBle1".api-ingress-…, and two spellings of one table are two
// endpoints.
func TestSteps_EndpointNamedAsSent(t *testing.T) {
	s, c := newServer(t, func(cfg *felderatest.Config) { cfg.StepTime = -1 })
	push(t, c, "TaBle1", `{"insert":{"Id":1}}`)
	raw(t, s, "POST", "/v0/pipelines/p1/ingress/TABLE1?format=json&update_format=insert_delete", `{"insert":{"id":2}}`)
	raw(t, s, "POST", "/v0/pipelines/p1/ingress/table1?format=json&update_format=insert_delete", `{"insert":{"id":3}}`)
	st, err := c.Stats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range st.Inputs {
		names = append(names, in.EndpointName[:strings.LastIndex(in.EndpointName, ".api-ingress-")])
	}
	got := strings.Join(sortedStrings(names), " ")
	if got != `"TaBle1" TABLE1 table1` {
		t.Fatalf("endpoints %q, want one per spelling, named as sent", got)
	}
	if n := st.IngressBuffered(map[string]bool{"TaBle1": true}); n != 0 {
		t.Fatalf("buffered %d", n)
	}
}

func sortedStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// IngressBuffered counts a quoted table's endpoint under its canonical
// name: held steps leave a request's records buffered.
func TestSteps_BufferedByCanonicalName(t *testing.T) {
	s, c := newServer(t, nil)
	s.HoldCompletion(true)
	if _, err := c.Ingress(ctx(t), "TaBle1", []byte("{\"insert\":{\"Id\":1}}\n{\"insert\":{\"Id\":2}}")); err != nil {
		t.Fatal(err)
	}
	st, err := c.Stats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if n := st.IngressBuffered(map[string]bool{"TaBle1": true}); n != 2 {
		t.Fatalf("buffered %d records of \"TaBle1\", want 2 (inputs %+v)", n, st.Inputs)
	}
}

// total_records counts what each endpoint queued since the pipeline
// process created it, summed per table over its spellings' endpoints, a
// request cut short with what Feldera kept of it (stats.rs,
// InputEndpointMetrics::total_records); a restart starts it again.
func TestSteps_TotalRecordsPerTable(t *testing.T) {
	s, c := newServer(t, nil)
	push(t, c, "TaBle1", "{\"insert\":{\"Id\":1}}\n{\"insert\":{\"Id\":2}}\n")
	raw(t, s, "POST", "/v0/pipelines/p1/ingress/%22TaBle1%22?format=json&update_format=insert_delete", `{"insert":{"Id":3}}`)
	s.InjectFault(felderatest.Fault{Kind: felderatest.PartialThen503, Path: "ingress"})
	if _, err := c.Ingress(ctx(t), "TaBle1", []byte("{\"insert\":{\"Id\":4}}\n{\"insert\":{\"Id\":5}}\n{\"insert\":{\"Id\":6}}\n{\"insert\":{\"Id\":7}}\n")); err == nil {
		t.Fatal("a request Feldera took in part was answered 200")
	}
	s.ClearFaults()
	totals := func() map[string]uint64 {
		st, err := c.Stats(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return st.IngressTotals()
	}
	if got := totals(); got["TaBle1"] != 5 || len(got) != 1 {
		t.Fatalf("totals %v, want TaBle1: 5 (2 + 1 + the 2 kept of 4)", got)
	}
	s.RestartInPlace()
	if got := totals(); got["TaBle1"] != 0 {
		t.Fatalf("totals %v after a restart, want 0", got)
	}
}

// A commit runs over steps, takes longer the more records the
// transaction holds, and shows its progress meanwhile (commit_progress).
func TestSteps_LongCommitShowsProgress(t *testing.T) {
	_, c := newServer(t, func(cfg *felderatest.Config) {
		cfg.StepTime, cfg.CommitPerRecord = time.Millisecond, 20*time.Millisecond
	})
	id, err := c.StartTransaction(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&body, `{"insert":{"id":%d}}`+"\n", i)
	}
	if _, err := c.Ingress(ctx(t), "users", []byte(body.String())); err != nil {
		t.Fatal(err)
	}
	waitStats(t, c, "the transaction to take its input", func(g feldera.GlobalMetrics) bool {
		return g.TransactionStatus == "TransactionInProgress" && g.TransactionID == id
	})
	if err := c.CommitTransaction(ctx(t)); err != nil {
		t.Fatal(err)
	}
	waitStats(t, c, "a commit part done", func(g feldera.GlobalMetrics) bool {
		return g.TransactionStatus == "CommitInProgress" && g.TransactionID == id && strings.Contains(string(g.CommitProgress), `"in_progress":1`) &&
			!strings.Contains(string(g.CommitProgress), `"completed":0,`)
	})
	waitCommitted(t, c, id)
}

// A commit asked before the transaction's first step drops it
// (start_commit_transaction_from_api), even with data queued: that data
// goes to later ordinary steps, outside any transaction.
func TestSteps_CommitBeforeFirstStepDrops(t *testing.T) {
	s, c := newServer(t, func(cfg *felderatest.Config) { cfg.StepTime = time.Second })
	if _, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`)); err != nil {
		t.Fatal(err) // an ordinary step runs now
	}
	id, err := c.StartTransaction(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":2}}`)) // queued behind the step
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CommitTransaction(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitComplete(ctx(t), tok); err != nil {
		t.Fatal(err)
	}
	if s.TransactionsDropped() != 1 || s.TransactionsCommitted() != 0 {
		t.Fatalf("transaction %d: dropped %d, committed %d; want it dropped", id, s.TransactionsDropped(), s.TransactionsCommitted())
	}
	wantRows(t, s, "users", `{"id":1,"name":null,"score":7,"tag":"none"}
{"id":2,"name":null,"score":7,"tag":"none"}`)
}

// An endpoint stops reading a body while its queue is full
// (max_queued_records); held past the manager's forward timeout, the
// request is answered 503, with what was read queued and later applied.
func TestSteps_BackpressureThen503(t *testing.T) {
	s, c := newServer(t, func(cfg *felderatest.Config) {
		cfg.MaxQueuedRecords, cfg.ReadBytes, cfg.IngressTimeout = 5, 64, 300*time.Millisecond
	})
	s.HoldCompletion(true)
	if _, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":100}}`+"\n")); err != nil {
		t.Fatal(err)
	}
	if n := s.PushedBack(); n != 0 {
		t.Fatalf("a request that fits the buffer counted as pushed back %d times", n)
	}
	var body strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&body, `{"insert":{"id":%d}}`+"\n", i)
	}
	_, err := c.Ingress(ctx(t), "users", []byte(body.String()))
	if ae := apiErr(t, err); ae.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a body held by backpressure: %v", err)
	}
	if n := s.PushedBack(); n != 1 {
		t.Fatalf("one request met backpressure; PushedBack says %d", n)
	}
	s.HoldCompletion(false)
	deadline := time.Now().Add(10 * time.Second)
	for n := s.Len("users"); n <= 1 || n >= 41; n = s.Len("users") {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows: want the part read before the 503, not all 40 (and the first row)", n)
		}
		time.Sleep(time.Millisecond)
	}
}

package feldera_test

import (
	"sync"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

// waitCommitted polls /stats until transaction_id differs from id, the
// test Feldera's own SDK uses for "the commit finished".
func waitCommitted(t *testing.T, c *feldera.Client, id int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := c.Stats(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if st.GlobalMetrics.TransactionID != id {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("transaction %d still %s after 10 s", id, st.GlobalMetrics.TransactionStatus)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStats polls /stats until cond holds, for up to 10 s.
func waitStats(t *testing.T, c *feldera.Client, what string, cond func(feldera.GlobalMetrics) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := c.Stats(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if cond(st.GlobalMetrics) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: /stats %+v", what, st.GlobalMetrics)
		}
		time.Sleep(time.Millisecond)
	}
}

// Inside a transaction, ingress answers 200 with tokens as usual, but
// nothing is visible and no token completes until the commit; the commit
// makes both tables visible in one state.
func TestTransaction_AtomicAtCommit(t *testing.T) {
	var mu sync.Mutex
	var states [][2]int // users, events rows per exposed state
	s, c := newServer(t, func(cfg *felderatest.Config) {
		cfg.OnState = func(v felderatest.View) {
			mu.Lock()
			defer mu.Unlock()
			states = append(states, [2]int{len(v.Rows("users")), len(v.Rows("events"))})
		}
	})
	s.SetCommitDelay(100 * time.Millisecond)
	id, err := c.StartTransaction(ctx(t))
	if err != nil || id <= 0 {
		t.Fatalf("start: %d %v", id, err)
	}
	if st, _ := c.Stats(ctx(t)); st.GlobalMetrics.TransactionStatus != "NoTransaction" || st.GlobalMetrics.TransactionID != id {
		t.Fatalf("before any step: %+v, want NoTransaction with the pending ID %d", st.GlobalMetrics, id)
	}
	tokU, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`+"\n"+`{"insert":{"id":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	tokE, err := c.Ingress(ctx(t), "events", []byte(`{"insert":{"k":1,"v":"a"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Stats(ctx(t)); st.GlobalMetrics.TransactionStatus != "TransactionInProgress" || st.GlobalMetrics.TransactionID != id {
		t.Fatalf("after a step: %+v", st.GlobalMetrics)
	}
	for _, tok := range []string{tokU, tokE} {
		if done, err := c.Completion(ctx(t), tok); err != nil || done {
			t.Fatalf("a token inside an open transaction: done=%v err=%v", done, err)
		}
	}
	if n := len(s.Rows("users")); n != 0 {
		t.Fatalf("%d rows visible before the commit", n)
	}
	if err := c.CommitTransaction(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// The commit begins at the next step, once the one that runs ended.
	waitStats(t, c, "the commit to begin", func(g feldera.GlobalMetrics) bool {
		return g.TransactionStatus == "CommitInProgress" && g.TransactionID == id
	})
	// No input is fed while a commit runs.
	tokLate, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":3}}`))
	if err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, c, id)
	for _, tok := range []string{tokU, tokE, tokLate} {
		if err := c.WaitComplete(ctx(t), tok); err != nil {
			t.Fatal(err)
		}
	}
	wantRows(t, s, "users", `{"id":1,"name":null,"score":7,"tag":"none"}
{"id":2,"name":null,"score":7,"tag":"none"}
{"id":3,"name":null,"score":7,"tag":"none"}`)
	mu.Lock()
	defer mu.Unlock()
	if len(states) != 2 || states[0] != [2]int{2, 1} || states[1] != [2]int{3, 1} {
		t.Fatalf("exposed states %v, want [[2 1] [3 1]]: the transaction in one state, then the late row", states)
	}
	if s.TransactionsCommitted() != 1 {
		t.Fatalf("%d transactions committed", s.TransactionsCommitted())
	}
}

// Without a transaction every request is its own visible state: the
// OnState hook sees the half-applied two-table change a transaction hides.
func TestTransaction_WithoutOneViewsSeeEachRequest(t *testing.T) {
	var mu sync.Mutex
	var states [][2]int
	_, c := newServer(t, func(cfg *felderatest.Config) {
		cfg.OnState = func(v felderatest.View) {
			mu.Lock()
			defer mu.Unlock()
			states = append(states, [2]int{len(v.Rows("users")), len(v.Rows("events"))})
		}
	})
	push(t, c, "users", `{"insert":{"id":1}}`)
	push(t, c, "events", `{"insert":{"k":1}}`)
	mu.Lock()
	defer mu.Unlock()
	if len(states) != 2 || states[0] != [2]int{1, 0} {
		t.Fatalf("states %v, want the users row visible alone first", states)
	}
}

// The errors: 409 for a second start, 400 for a commit without an open
// transaction (never started, already committed), and a commit with no
// step since start simply drops the transaction.
func TestTransaction_Errors(t *testing.T) {
	_, c := newServer(t, nil)
	if err := c.CommitTransaction(ctx(t)); !feldera.IsNoTransactionInProgress(err) {
		t.Fatalf("commit with none open: %v", err)
	}
	id, err := c.StartTransaction(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartTransaction(ctx(t)); !feldera.IsTransactionInProgress(err) || apiErr(t, err).StatusCode != 409 {
		t.Fatalf("second start: %v", err)
	}
	// Nothing stepped: the commit drops it at once.
	if err := c.CommitTransaction(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Stats(ctx(t)); st.GlobalMetrics.TransactionID != 0 || st.GlobalMetrics.TransactionStatus != "NoTransaction" {
		t.Fatalf("after dropping %d: %+v", id, st.GlobalMetrics)
	}
	if err := c.CommitTransaction(ctx(t)); !feldera.IsNoTransactionInProgress(err) || apiErr(t, err).StatusCode != 400 {
		t.Fatalf("second commit: %v", err)
	}
	id2, err := c.StartTransaction(ctx(t))
	if err != nil || id2 <= id {
		t.Fatalf("next start: %d %v (IDs grow within a process)", id2, err)
	}
}

// A restart drops an open transaction: its data is gone, its tokens 410,
// and committing it answers 400; the ID counter starts again.
func TestTransaction_RestartDropsIt(t *testing.T) {
	s, c := newServer(t, nil)
	if _, err := c.StartTransaction(ctx(t)); err != nil {
		t.Fatal(err)
	}
	tok, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if err := c.CommitTransaction(ctx(t)); !feldera.IsNoTransactionInProgress(err) {
		t.Fatalf("commit after a restart: %v", err)
	}
	if _, err := c.Completion(ctx(t), tok); !feldera.IsRestarted(err) {
		t.Fatalf("old token after a restart: %v", err)
	}
	if n := len(s.Rows("users")); n != 0 {
		t.Fatalf("%d rows of a dropped transaction", n)
	}
	if id, err := c.StartTransaction(ctx(t)); err != nil || id != 1 {
		t.Fatalf("first transaction of the new process: %d %v", id, err)
	}
}

// Checkpoints wait while a transaction is open: one asked for meanwhile
// is taken after the commit.
func TestTransaction_CheckpointWaits(t *testing.T) {
	s, c := newServer(t, func(cfg *felderatest.Config) {
		cfg.FaultTolerance = `{"model": "at_least_once", "checkpoint_interval_secs": null}`
	})
	id, err := c.StartTransaction(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`)); err != nil {
		t.Fatal(err)
	}
	before, _ := c.Checkpoints(ctx(t))
	if _, err := c.RequestCheckpoint(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if cps, _ := c.Checkpoints(ctx(t)); len(cps) != len(before) {
		t.Fatalf("a checkpoint was taken inside the transaction: %d → %d", len(before), len(cps))
	}
	if err := c.CommitTransaction(ctx(t)); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, c, id)
	cps, _ := c.Checkpoints(ctx(t))
	if len(cps) != len(before)+1 || cps[len(cps)-1].Steps < s.Steps() {
		t.Fatalf("after the commit: %d checkpoints (was %d), last %+v, steps %d", len(cps), len(before), cps, s.Steps())
	}
}

// A transaction an input connector started (Delta's transaction_mode) is
// joined by start_transaction: no 409, the same ID, and /stats lists the
// connector among the initiators. It commits only once the API and the
// connector both committed; after the API's commit and before the commit
// begins, a new start is a 409. Ingress records stay buffered (listed per
// endpoint in /stats inputs) until a step takes them.
func TestTransaction_JoinsConnectorTransaction(t *testing.T) {
	s, c := newServer(t, nil)
	if err := s.StartConnectorTransaction("users.delta"); err != nil {
		t.Fatal(err)
	}
	id, err := c.StartTransaction(ctx(t))
	if err != nil {
		t.Fatalf("start while a connector holds the transaction: %v, want it joined", err)
	}
	if s.OpenTransaction() != id {
		t.Fatalf("joined %d, the open transaction is %d", id, s.OpenTransaction())
	}
	if _, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`)); err != nil {
		t.Fatal(err)
	}
	st, err := c.Stats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	in := st.GlobalMetrics.TransactionInitiators
	if in == nil || in.InitiatedByAPI == nil || *in.InitiatedByAPI != "Started" || len(in.InitiatedByConnectors) != 1 {
		t.Fatalf("initiators %+v, want the API started and one connector", in)
	}
	if err := c.CommitTransaction(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartTransaction(ctx(t)); !feldera.IsTransactionInProgress(err) {
		t.Fatalf("start after the API's commit, before the commit began: %v, want 409 TransactionInProgress", err)
	}
	time.Sleep(20 * time.Millisecond)
	if s.OpenTransaction() != id || len(s.Rows("users")) != 0 {
		t.Fatalf("the commit did not wait for the connector: open %d, %d rows visible", s.OpenTransaction(), len(s.Rows("users")))
	}
	if err := s.CommitConnectorTransaction("users.delta"); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, c, id)
	if n := len(s.Rows("users")); n != 1 {
		t.Fatalf("%d rows after both committed, want 1", n)
	}
}

// /stats inputs lists each HTTP ingress endpoint as <table>.api-ingress-<hash>
// with the records no step took yet.
func TestStats_IngressBuffered(t *testing.T) {
	s, c := newServer(t, nil)
	s.SetCompletionDelay(time.Hour)
	if _, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`+"\n"+`{"insert":{"id":2}}`)); err != nil {
		t.Fatal(err)
	}
	st, err := c.Stats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if n := st.IngressBuffered(map[string]bool{"users": true}); n != 2 {
		t.Fatalf("users buffers %d records, want 2 (inputs %+v)", n, st.Inputs)
	}
	if n := st.IngressBuffered(map[string]bool{"events": true}); n != 0 {
		t.Fatalf("events buffers %d records, want 0", n)
	}
}

package feldera_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

// The portable contract tests (TestPortable_*) hold the double and a real
// Feldera to the same assertions. By default they run against the double
// (felderatest) built from testdata/contract.sql; with FELDERA_TEST_URL
// and FELDERA_TEST_PIPELINE set (FELDERA_TEST_API_KEY when the server
// wants one) they run against that pipeline, which must run the program
// in testdata/contract.sql. Anyone with a Feldera can check the double's
// fidelity so: a test that fails there and passes here is the double
// being wrong.

// target is the Feldera a portable contract test talks to.
type target struct {
	where  string
	client *feldera.Client
	double *felderatest.Server // nil against a real pipeline
}

func newTarget(t *testing.T) *target {
	t.Helper()
	program, err := os.ReadFile("testdata/contract.sql")
	if err != nil {
		t.Fatal(err)
	}
	if url := os.Getenv("FELDERA_TEST_URL"); url != "" {
		pipeline := os.Getenv("FELDERA_TEST_PIPELINE")
		if pipeline == "" {
			t.Fatal("FELDERA_TEST_URL is set without FELDERA_TEST_PIPELINE")
		}
		c, err := feldera.New(feldera.Config{URL: url, Pipeline: pipeline, APIKey: os.Getenv("FELDERA_TEST_API_KEY"), RequestTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		tg := &target{where: fmt.Sprintf("pipeline %s at %s", pipeline, url), client: c}
		tg.empty(t)
		return tg
	}
	s, err := felderatest.NewServer(felderatest.Config{Pipeline: "p1", Tables: felderatest.MustParseDDL(string(program))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, err := feldera.New(feldera.Config{URL: s.URL, Pipeline: "p1", RequestTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return &target{where: "the double", client: c, double: s}
}

// contractTables are the program's tables, by canonical name (as the
// client's Ingress takes them).
var contractTables = []string{"c_keyed", "c_keyless", "C_Quoted", "c_txn"}

// empty deletes every row of the contract's tables (a real pipeline keeps
// them from the last run): each row read back, sent as a delete.
func (tg *target) empty(t *testing.T) {
	t.Helper()
	for _, table := range contractTables {
		var body strings.Builder
		for _, r := range tg.rows(t, table) {
			fmt.Fprintf(&body, "{\"delete\":%s}\n", r)
		}
		if body.Len() > 0 {
			tg.push(t, table, body.String())
		}
	}
}

// push sends lines and waits until they completed.
func (tg *target) push(t *testing.T, table, lines string) {
	t.Helper()
	tok, err := tg.client.Ingress(context.Background(), table, []byte(lines))
	if err != nil {
		t.Fatalf("%s: ingress %s: %v", tg.where, table, err)
	}
	if err := tg.client.WaitComplete(context.Background(), tok); err != nil {
		t.Fatalf("%s: completion of %s: %v", tg.where, table, err)
	}
}

// rows reads a table (by canonical name) with an ad-hoc query, each row
// as JSON with its keys sorted, the rows sorted.
func (tg *target) rows(t *testing.T, table string) []string {
	t.Helper()
	var out []string
	err := tg.client.Query(context.Background(), "SELECT * FROM "+feldera.SQLIdent(table), func(row json.RawMessage) error {
		var m map[string]any
		if err := json.Unmarshal(row, &m); err != nil {
			return err
		}
		b, err := json.Marshal(m) // map keys come out sorted
		if err != nil {
			return err
		}
		out = append(out, string(b))
		return nil
	})
	if err != nil {
		t.Fatalf("%s: SELECT * FROM %s: %v", tg.where, table, err)
	}
	sort.Strings(out)
	return out
}

func (tg *target) wantRows(t *testing.T, table string, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := tg.rows(t, table); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s: %s holds\n%s\nwant\n%s", tg.where, table, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A keyed table: an insert of a present key replaces the row, a delete
// names the key alone, an update changes the columns it names.
func TestPortable_KeyedTable(t *testing.T) {
	tg := newTarget(t)
	tg.push(t, "c_keyed", `{"insert":{"id":1,"name":"a","score":1}}
{"insert":{"id":2,"name":"b","score":2}}
{"insert":{"id":1,"name":"a2","score":10}}
{"delete":{"id":2}}
{"update":{"id":1,"score":11}}`)
	tg.wantRows(t, "c_keyed", `{"id":1,"name":"a2","score":11}`)
}

// A keyless table is a multiset: an insert twice is two rows, a delete of
// the whole row removes one of them.
func TestPortable_KeylessTable(t *testing.T) {
	tg := newTarget(t)
	tg.push(t, "c_keyless", `{"insert":{"k":1,"v":"a"}}
{"insert":{"k":1,"v":"a"}}
{"insert":{"k":2,"v":"b"}}
{"delete":{"k":1,"v":"a"}}`)
	tg.wantRows(t, "c_keyless", `{"k":1,"v":"a"}`, `{"k":2,"v":"b"}`)
}

// A quoted, mixed-case table is addressed by its quoted name, and its
// ingress endpoint in /stats is named from the path segment as sent.
func TestPortable_QuotedTableAndEndpointName(t *testing.T) {
	tg := newTarget(t)
	tg.push(t, "C_Quoted", `{"insert":{"Id":1,"Val":"x"}}`) // the client quotes it
	tg.wantRows(t, "C_Quoted", `{"Id":1,"Val":"x"}`)
	st, err := tg.client.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, in := range st.Inputs {
		found = found || strings.HasPrefix(in.EndpointName, `"C_Quoted".api-ingress-`)
	}
	if !found {
		t.Fatalf("%s: no input endpoint named \"C_Quoted\".api-ingress-… in /stats", tg.where)
	}
}

// A line that does not parse is reported (400 ParseErrors), and the good
// lines of the same request are applied.
func TestPortable_ParseErrorsApplyGoodLines(t *testing.T) {
	tg := newTarget(t)
	_, err := tg.client.Ingress(context.Background(), "c_keyed", []byte(`{"insert":{"id":5,"name":"good"}}
{"insert":{"name":"no key"}}`))
	if !feldera.IsParseErrors(err) {
		t.Fatalf("%s: err = %v, want ParseErrors", tg.where, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(tg.rows(t, "c_keyed")) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	tg.wantRows(t, "c_keyed", `{"id":5,"name":"good","score":null}`)
}

// Inside an API transaction, pushed rows become visible at the commit and
// not before; /stats names the transaction until the commit finished.
func TestPortable_TransactionVisibleAtCommit(t *testing.T) {
	tg := newTarget(t)
	ctx := context.Background()
	id, err := tg.client.StartTransaction(ctx)
	if err != nil || id <= 0 {
		t.Fatalf("%s: start_transaction: %d, %v", tg.where, id, err)
	}
	if _, err := tg.client.Ingress(ctx, "c_txn", []byte(`{"insert":{"id":1,"v":1}}
{"insert":{"id":2,"v":2}}`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // several steps
	tg.wantRows(t, "c_txn")
	if err := tg.client.CommitTransaction(ctx); err != nil {
		t.Fatalf("%s: commit_transaction: %v", tg.where, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := tg.client.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if in := st.GlobalMetrics.TransactionInitiators; in == nil || in.TransactionID == nil || *in.TransactionID != id {
			if st.GlobalMetrics.TransactionID != id {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: transaction %d still named after a minute: %+v", tg.where, id, st.GlobalMetrics)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tg.wantRows(t, "c_txn", `{"id":1,"v":1}`, `{"id":2,"v":2}`)
}

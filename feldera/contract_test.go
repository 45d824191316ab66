package feldera_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

const ddl = `
CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, score INT DEFAULT 7, tag VARCHAR NOT NULL DEFAULT 'none');
CREATE TABLE events (k INT, v VARCHAR);
CREATE TABLE mat (k INT, v VARCHAR) WITH ('materialized' = 'true');
CREATE TABLE "TaBle1" ("Id" INT NOT NULL PRIMARY KEY, "C2" VARCHAR, plain INT);
CREATE TABLE table1 (id INT NOT NULL PRIMARY KEY);
CREATE TABLE typed (id INT NOT NULL PRIMARY KEY, d DECIMAL(5,2), b VARBINARY, ts TIMESTAMP, f DOUBLE, ok BOOLEAN, dt DATE, tm TIME, u UUID, j VARIANT, arr INT ARRAY);
`

func newServer(t *testing.T, mod func(*felderatest.Config)) (*felderatest.Server, *feldera.Client) {
	t.Helper()
	cfg := felderatest.Config{Pipeline: "p1", Tables: felderatest.MustParseDDL(ddl)}
	if mod != nil {
		mod(&cfg)
	}
	s, err := felderatest.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, err := feldera.New(feldera.Config{URL: s.URL, Pipeline: "p1", APIKey: cfg.APIKey, RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// raw sends a request straight to the double and returns status and body.
func raw(t *testing.T, s *felderatest.Server, method, path, body string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func push(t *testing.T, c *feldera.Client, table, body string) string {
	t.Helper()
	tok, err := c.Ingress(ctx(t), table, []byte(body))
	if err != nil {
		t.Fatalf("ingress %s: %v", table, err)
	}
	if err := c.WaitComplete(ctx(t), tok); err != nil {
		t.Fatalf("wait: %v", err)
	}
	return tok
}

func rows(s *felderatest.Server, table string) string {
	var out []string
	for _, r := range s.Rows(table) {
		out = append(out, r.String())
	}
	return strings.Join(out, "\n")
}

// wantRows waits up to 10 s for a table to hold want: steps take time,
// and what a request queued shows only once its step ended.
func wantRows(t *testing.T, s *felderatest.Server, table, want string) {
	t.Helper()
	want = strings.TrimSpace(want)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := rows(s, table)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s rows:\n got: %s\nwant: %s", table, got, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func apiErr(t *testing.T, err error) *feldera.APIError {
	t.Helper()
	var ae *feldera.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an *APIError", err)
	}
	return ae
}

var _ = json.Marshal

func TestErrors_UnknownPipelineAndNotDeployed(t *testing.T) {
	s, _ := newServer(t, nil)
	st, body := raw(t, s, "GET", "/v0/pipelines/nope", "")
	if st != 404 || !strings.Contains(body, `"error_code":"UnknownPipelineName"`) || !strings.Contains(body, `"details"`) || !strings.Contains(body, `"message"`) {
		t.Fatalf("unknown pipeline: %d %s", st, body)
	}
	c, _ := feldera.New(feldera.Config{URL: s.URL, Pipeline: "nope"})
	if _, err := c.Pipeline(ctx(t)); apiErr(t, err).Code != "UnknownPipelineName" {
		t.Fatalf("client error: %v", err)
	}
	s.SetStatus("Stopped")
	_, c2 := newServerClient(t, s)
	_, err := c2.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`))
	if ae := apiErr(t, err); ae.StatusCode != 503 || ae.Code != "PipelineInteractionNotDeployed" || !feldera.IsTransient(err) {
		t.Fatalf("not deployed: %v", err)
	}
}

func newServerClient(t *testing.T, s *felderatest.Server) (*felderatest.Server, *feldera.Client) {
	c, err := feldera.New(feldera.Config{URL: s.URL, Pipeline: "p1", RetryMax: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func TestAuth(t *testing.T) {
	s, c := newServer(t, func(c *felderatest.Config) { c.APIKey = "apikey:secret123" })
	if _, err := c.Pipeline(ctx(t)); err != nil {
		t.Fatalf("with key: %v", err)
	}
	st, body := raw(t, s, "GET", "/v0/pipelines/p1", "")
	if st != 401 || body != "" {
		t.Fatalf("missing header: %d %q", st, body)
	}
	st, body = raw(t, s, "GET", "/v0/pipelines/p1", "", "Authorization", "Bearer apikey:wrong")
	if st != 401 || !strings.Contains(body, "AuthenticationFailed") || strings.Contains(body, "details") {
		t.Fatalf("bad key: %d %q", st, body)
	}
	bad, _ := feldera.New(feldera.Config{URL: s.URL, Pipeline: "p1", APIKey: "apikey:wrong"})
	_, err := bad.Pipeline(ctx(t))
	if ae := apiErr(t, err); ae.StatusCode != 401 || ae.Code != "AuthenticationFailed" {
		t.Fatalf("client bad key: %v", err)
	}
	if strings.Contains(err.Error(), "apikey:wrong") {
		t.Fatalf("error leaks the key: %v", err)
	}
}

func TestPipeline_Schema(t *testing.T) {
	s, c := newServer(t, nil)
	p, err := c.Pipeline(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if p.DeploymentStatus != "Running" || p.DeploymentID == nil || p.ProgramInfo == nil {
		t.Fatalf("pipeline = %+v", p)
	}
	users, ok := p.ProgramInfo.Schema.Input("USERS")
	if !ok || users.Name != "users" || users.CaseSensitive || len(users.PrimaryKey) != 1 || users.PrimaryKey[0] != "id" {
		t.Fatalf("users = %+v", users)
	}
	if f, ok := users.Field("NAME"); !ok || f.ColumnType.Type != "VARCHAR" || !f.ColumnType.Nullable {
		t.Fatalf("users.name = %+v", f)
	}
	ev, _ := p.ProgramInfo.Schema.Input("events")
	if ev.PrimaryKey != nil || ev.Materialized {
		t.Fatalf("events = %+v", ev)
	}
	q, ok := p.ProgramInfo.Schema.Input(`"TaBle1"`)
	if !ok || !q.CaseSensitive {
		t.Fatalf("TaBle1 = %+v, %v", q, ok)
	}
	if _, ok := q.Field("c2"); ok {
		t.Fatal(`quoted "C2" matched c2`)
	}
	_, body := raw(t, s, "GET", "/v0/pipelines/p1", "")
	if !strings.Contains(body, `"primary_key":null`) || !strings.Contains(body, `"materialized":true`) || !strings.Contains(body, `"columntype"`) {
		t.Fatalf("schema document: %s", body)
	}
	_, body = raw(t, s, "GET", "/v0/pipelines/p1?selector=status", "")
	if strings.Contains(body, "program_info") || !strings.Contains(body, "deployment_status") {
		t.Fatalf("selector=status: %s", body)
	}
}

func TestIngress_Parameters(t *testing.T) {
	s, _ := newServer(t, nil)
	line := `{"insert":{"id":1,"name":"a"}}`
	st, body := raw(t, s, "POST", "/v0/pipelines/p1/ingress/users", line)
	if st != 400 || !strings.Contains(body, "ParseErrors") {
		t.Fatalf("format defaults to csv, want 400 ParseErrors: %d %s", st, body)
	}
	st, body = raw(t, s, "POST", "/v0/pipelines/p1/ingress/users?format=json&array=True", line)
	if st != 400 || !strings.Contains(body, "ParserConfigParseError") {
		t.Fatalf("array=True: %d %s", st, body)
	}
	st, body = raw(t, s, "POST", "/v0/pipelines/p1/ingress/users?format=xml", line)
	if st != 400 || !strings.Contains(body, "UnknownInputFormat") {
		t.Fatalf("format=xml: %d %s", st, body)
	}
	st, body = raw(t, s, "POST", "/v0/pipelines/p1/ingress/users?format=json&update_format=insert_delete&whatever=1&force=false", line)
	if st != 200 || !strings.Contains(body, "token") {
		t.Fatalf("unknown parameter should be ignored: %d %s", st, body)
	}
	st, _ = raw(t, s, "POST", "/v0/pipelines/p1/ingress/users?format=json&update_format=raw", `{"id":2,"name":"raw"}`)
	if st != 200 {
		t.Fatalf("raw: %d", st)
	}
	wantRows(t, s, "users", `{"id":1,"name":"a","score":7,"tag":"none"}
{"id":2,"name":"raw","score":7,"tag":"none"}`)
}

func TestIngress_TableLookup(t *testing.T) {
	s, c := newServer(t, nil)
	if st, _ := raw(t, s, "POST", "/v0/pipelines/p1/ingress/TABLE1?format=json", `{"insert":{"id":1}}`); st != 200 {
		t.Fatalf("unquoted TABLE1 → table1: %d", st)
	}
	if st, body := raw(t, s, "POST", "/v0/pipelines/p1/ingress/%22TaBle1%22?format=json", `{"insert":{"Id":5}}`); st != 200 {
		t.Fatalf("quoted: %d %s", st, body)
	}
	wantRows(t, s, "table1", `{"id":1}`)
	wantRows(t, s, `"TaBle1"`, `{"C2":null,"Id":5,"plain":null}`)
	// The client quotes a mixed-case canonical name itself.
	push(t, c, "TaBle1", `{"insert":{"Id":6,"C2":"x","PLAIN":3}}`)
	wantRows(t, s, `"TaBle1"`, `{"C2":null,"Id":5,"plain":null}
{"C2":"x","Id":6,"plain":3}`)
	_, err := c.Ingress(ctx(t), "nosuch", []byte(`{"insert":{}}`))
	if ae := apiErr(t, err); ae.StatusCode != 404 || !strings.HasSuffix(ae.Code, "UnknownInputStream") {
		t.Fatalf("unknown table: %v", err)
	}
}

func TestIngress_FieldMatching(t *testing.T) {
	s, c := newServer(t, nil)
	push(t, c, "users", `{"insert":{"ID":1,"Name":"upper keys","unknown_col":9}}
{"insert":[2,"positional",3,"t"]}`)
	wantRows(t, s, "users", `{"id":1,"name":"upper keys","score":7,"tag":"none"}
{"id":2,"name":"positional","score":3,"tag":"t"}`)
	_, err := c.Ingress(ctx(t), "TaBle1", []byte(`{"insert":{"id":7}}`))
	if !feldera.IsParseErrors(err) || !strings.Contains(err.Error(), "incorrect case-sensitive field name") {
		t.Fatalf("quoted column with wrong case: %v", err)
	}
	_, err = c.Ingress(ctx(t), "users", []byte(`{"insert":{"name":"no key"}}`))
	if !feldera.IsParseErrors(err) || !strings.Contains(err.Error(), "missing field `id`") {
		t.Fatalf("missing NOT NULL: %v", err)
	}
	_, err = c.Ingress(ctx(t), "users", []byte(`{"insert":[3]}`))
	if !feldera.IsParseErrors(err) || !strings.Contains(err.Error(), "invalid length 1, expected 4 columns") {
		t.Fatalf("short positional: %v", err)
	}
}

func TestIngress_Envelope(t *testing.T) {
	s, c := newServer(t, nil)
	_, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1},"upsert":{"id":1}}`))
	if !feldera.IsParseErrors(err) || !strings.Contains(err.Error(), "unknown field `upsert`") {
		t.Fatalf("envelope with unknown key: %v", err)
	}
	push(t, c, "users", `{"insert":{"id":1,"name":"a"}}`)
	// Combined: delete, then insert, then update, whatever the order written.
	push(t, c, "users", `{"update":{"id":1,"name":"updated"},"insert":{"id":1,"name":"inserted"},"delete":{"id":1}}`)
	wantRows(t, s, "users", `{"id":1,"name":"updated","score":7,"tag":"none"}`)
}

func TestTable_PrimaryKey(t *testing.T) {
	s, c := newServer(t, nil)
	push(t, c, "users", `{"insert":{"id":1,"name":"a","score":1}}
{"insert":{"id":2,"name":"b","score":2}}
{"insert":{"id":1,"name":"a2","score":1}}
{"delete":{"id":2,"name":"ignored extra column"}}
{"delete":{"id":99}}
{"update":{"id":1,"score":null}}
{"update":{"id":42,"name":"missing key ignored"}}
{"insert":{"id":3,"name":"first"}}
{"insert":{"id":3,"name":"last wins"}}`)
	wantRows(t, s, "users", `{"id":1,"name":"a2","score":null,"tag":"none"}
{"id":3,"name":"last wins","score":7,"tag":"none"}`)
	if st, _ := raw(t, s, "POST", "/v0/pipelines/p1/ingress/users?format=json", `{"insert":{"id":1,"name":"x"}}`+"\n"+`{"insert":{"id":1,"name":"x"}}`); st != 200 {
		t.Fatal("replayed insert")
	}
	if n := len(s.Rows("users")); n != 2 {
		t.Fatalf("a replayed insert is an upsert on a keyed table: %d rows", n)
	}
}

func TestTable_Keyless(t *testing.T) {
	s, c := newServer(t, nil)
	push(t, c, "events", `{"insert":{"k":1,"v":"a"}}
{"insert":{"k":1,"v":"a"}}
{"insert":{"k":2}}`)
	wantRows(t, s, "events", `{"k":1,"v":"a"}
{"k":1,"v":"a"}
{"k":2,"v":null}`)
	push(t, c, "events", `{"delete":{"k":1,"v":"a"}}
{"delete":{"k":2}}`)
	wantRows(t, s, "events", `{"k":1,"v":"a"}`)
	if s.MissedDeletes() != 0 {
		t.Fatal("no delete missed yet")
	}
	push(t, c, "events", `{"delete":{"k":1}}`) // not the whole row: misses
	if s.MissedDeletes() != 1 {
		t.Fatalf("missed deletes = %d, want 1", s.MissedDeletes())
	}
	_, err := c.Ingress(ctx(t), "events", []byte(`{"update":{"k":1,"v":"b"}}`))
	if !feldera.IsParseErrors(err) || !strings.Contains(err.Error(), "update operation is not supported") {
		t.Fatalf("update on keyless: %v", err)
	}
}

func TestIngress_ParseErrorsApplyGoodLines(t *testing.T) {
	s, c := newServer(t, nil)
	_, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}
{"insert":{"id":"two"}}
{"insert":{"id":3}}`))
	ae := apiErr(t, err)
	if ae.StatusCode != 400 || !feldera.IsParseErrors(err) || !strings.Contains(ae.Message, "Errors parsing input data (1 errors)") {
		t.Fatalf("ParseErrors: %v", err)
	}
	var d struct {
		NumErrors int `json:"num_errors"`
		Errors    []struct {
			EventNumber int `json:"event_number"`
		} `json:"errors"`
	}
	if json.Unmarshal(ae.Details, &d) != nil || d.NumErrors != 1 || d.Errors[0].EventNumber != 2 {
		t.Fatalf("details: %s", ae.Details)
	}
	wantRows(t, s, "users", `{"id":1,"name":null,"score":7,"tag":"none"}
{"id":3,"name":null,"score":7,"tag":"none"}`)
	st, _ := raw(t, s, "POST", "/v0/pipelines/p1/ingress/events?format=json&array=true",
		`[{"insert":{"k":10}},{"insert":{"k":"bad"}}]`+"\n"+`[{"insert":{"k":11}}]`)
	if st != 400 {
		t.Fatalf("array with a bad event: %d", st)
	}
	wantRows(t, s, "events", `{"k":11,"v":null}`)
}

func TestToken_FormatAndEndpoints(t *testing.T) {
	s, c := newServer(t, nil)
	tok1, _ := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`+"\n"+`{"insert":{"id":2}}`))
	tok2, _ := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":3}}`))
	tok3, _ := c.Ingress(ctx(t), "events", []byte(`{"insert":{"k":3}}`))
	dec := func(tok string) (m struct {
		U string
		E uint64
		C uint64
	}) {
		if strings.ContainsAny(tok, "+/=") {
			t.Fatalf("token %q is not base64url without padding", tok)
		}
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || json.Unmarshal(b, &m) != nil {
			t.Fatalf("token %q: %v", tok, err)
		}
		return m
	}
	a, b, e := dec(tok1), dec(tok2), dec(tok3)
	if a.U == "" || a.E != b.E || a.C != 2 || b.C != 3 || e.E == a.E || e.C != 1 {
		t.Fatalf("tokens: %+v %+v %+v", a, b, e)
	}
	// Other parameters are another endpoint with its own counter.
	_, body := raw(t, s, "POST", "/v0/pipelines/p1/ingress/users?format=json&update_format=raw", `{"id":9}`)
	var tr struct{ Token string }
	json.Unmarshal([]byte(body), &tr)
	if o := dec(tr.Token); o.E == a.E || o.C != 1 {
		t.Fatalf("raw endpoint token %+v", o)
	}
}

func TestCompletion(t *testing.T) {
	s, c := newServer(t, nil)
	s.HoldCompletion(true)
	tok, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if done, err := c.Completion(ctx(t), tok); err != nil || done {
		t.Fatalf("held: done=%v err=%v", done, err)
	}
	if n := len(s.Rows("users")); n != 0 {
		t.Fatalf("held data is applied: %d rows", n)
	}
	st, body := raw(t, s, "GET", "/v0/pipelines/p1/completion_status?token="+url.QueryEscape(tok), "")
	if st != 200 || body != "{\"status\":\"inprogress\",\"step\":null}\n" {
		t.Fatalf("inprogress: %d %q", st, body)
	}
	s.HoldCompletion(false)
	if err := c.WaitComplete(ctx(t), tok); err != nil {
		t.Fatalf("released: %v", err)
	}
	// Monotonic: an earlier token of the endpoint stays complete.
	tok2 := push(t, c, "users", `{"insert":{"id":2}}`)
	for _, tk := range []string{tok, tok2} {
		if done, _ := c.Completion(ctx(t), tk); !done {
			t.Fatal("completion went backwards")
		}
	}
	// Delay.
	s.SetCompletionDelay(300 * time.Millisecond)
	tok3, _ := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":3}}`))
	if done, _ := c.Completion(ctx(t), tok3); done {
		t.Fatal("complete before the delay")
	}
	start := time.Now()
	if err := c.WaitComplete(ctx(t), tok3); err != nil || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("delay: %v after %s", err, time.Since(start))
	}
	// Bad token.
	_, err = c.Completion(ctx(t), "!!notbase64")
	if ae := apiErr(t, err); ae.StatusCode != 400 || ae.Code != "InvalidParam" {
		t.Fatalf("bad token: %v", err)
	}
	st, _ = raw(t, s, "GET", "/v0/pipelines/p1/completion_status", "")
	if st != 400 {
		t.Fatalf("missing token: %d", st)
	}
}

func TestCompletion_TokenPercentEncoded(t *testing.T) {
	_, c := newServer(t, func(c *felderatest.Config) { c.PaddedTokens = true })
	tok, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.ContainsAny(tok, "+/=") {
		t.Fatalf("token %q holds none of + / =", tok)
	}
	if err := c.WaitComplete(ctx(t), tok); err != nil {
		t.Fatalf("a token with + / = must be percent-encoded: %v", err)
	}
}

func TestRestart(t *testing.T) {
	s, c := newServer(t, nil)
	tok := push(t, c, "users", `{"insert":{"id":1}}`)
	p1, _ := c.Pipeline(ctx(t))
	s.HoldCompletion(true)
	pending, _ := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":2}}`))
	s.Restart()
	s.HoldCompletion(false)
	for _, tk := range []string{tok, pending} {
		_, err := c.Completion(ctx(t), tk)
		if ae := apiErr(t, err); ae.StatusCode != 410 || !feldera.IsPipelineRestarted(err) {
			t.Fatalf("old token after restart: %v", err)
		}
	}
	if n := len(s.Rows("users")); n != 0 {
		t.Fatalf("restart without fault tolerance keeps %d rows", n)
	}
	p2, _ := c.Pipeline(ctx(t))
	if *p1.DeploymentID == *p2.DeploymentID {
		t.Fatal("deployment_id unchanged by restart")
	}
	// Fault tolerant: completed state survives, uncompleted does not.
	s2, c2 := newServer(t, func(c *felderatest.Config) { c.FaultTolerant = true })
	push(t, c2, "users", `{"insert":{"id":1}}`)
	s2.HoldCompletion(true)
	c2.Ingress(ctx(t), "users", []byte(`{"insert":{"id":2}}`))
	s2.Restart()
	s2.HoldCompletion(false)
	wantRows(t, s2, "users", `{"id":1,"name":null,"score":7,"tag":"none"}`)
}

func TestPause_BlocksIngress(t *testing.T) {
	s, c := newServer(t, func(c *felderatest.Config) { c.IngressTimeout = 200 * time.Millisecond })
	s.SetStatus("Paused")
	_, c1 := newServerClient(t, s)
	_, err := c1.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`))
	if ae := apiErr(t, err); ae.StatusCode != 503 || ae.Code != "PipelineInteractionUnreachable" {
		t.Fatalf("paused: %v", err)
	}
	go func() { time.Sleep(100 * time.Millisecond); s.SetStatus("Running") }()
	push(t, c, "users", `{"insert":{"id":1}}`)
}

func TestFaults(t *testing.T) {
	s, c := newServer(t, nil)
	// Transient failures of reads are retried by the client…
	s.InjectFault(felderatest.Fault{Kind: felderatest.FailStatus, Path: "completion_status", Count: 2})
	push(t, c, "users", `{"insert":{"id":1}}`)
	// …ingress is not: an unanswered push may still land later, so the
	// caller must fence and replay rather than the client re-sending.
	before := len(s.Requests())
	s.InjectFault(felderatest.Fault{Kind: felderatest.Drop, Path: "ingress", Count: 1})
	if _, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`)); !feldera.IsOutcomeUnknown(err) {
		t.Fatalf("dropped ingress: %v", err)
	}
	if _, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":1}}`)); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Requests()) - before; n != 1 {
		t.Fatalf("ingress was retried: %d requests reached the server, want 1", n)
	}
	// Without retries, the 503 surfaces as transient.
	_, c0 := newServerClient(t, s)
	s.InjectFault(felderatest.Fault{Kind: felderatest.FailStatus, Path: "ingress", Count: 1})
	if _, err := c0.Ingress(ctx(t), "users", []byte(`{"insert":{"id":2}}`)); !feldera.IsTransient(err) {
		t.Fatalf("503: %v", err)
	}
	// A 400 is not transient and not retried.
	if _, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":"x"}}`)); feldera.IsTransient(err) {
		t.Fatalf("400 is transient: %v", err)
	}
	// Dropped connection: no response.
	s.InjectFault(felderatest.Fault{Kind: felderatest.Drop, Path: "ingress", Count: 1})
	if _, err := c0.Ingress(ctx(t), "users", []byte(`{"insert":{"id":3}}`)); !feldera.IsTransient(err) || feldera.ErrorCode(err) != "transport" {
		t.Fatalf("drop: %v", err)
	}
	// Hang past the client's timeout.
	s.InjectFault(felderatest.Fault{Kind: felderatest.Hang, Path: "ingress"})
	ch, _ := feldera.New(feldera.Config{URL: s.URL, Pipeline: "p1", RequestTimeout: 200 * time.Millisecond, RetryMax: -1})
	if _, err := ch.Ingress(ctx(t), "users", []byte(`{"insert":{"id":4}}`)); !feldera.IsTransient(err) {
		t.Fatalf("hang: %v", err)
	}
	s.ClearFaults()
	// 503 after partial ingestion.
	s.InjectFault(felderatest.Fault{Kind: felderatest.PartialThen503, Path: "ingress", Count: 1})
	_, err := c0.Ingress(ctx(t), "events", []byte(`{"insert":{"k":1}}
{"insert":{"k":2}}
{"insert":{"k":3}}
{"insert":{"k":4}}`))
	if !feldera.IsTransient(err) {
		t.Fatalf("partial: %v", err)
	}
	wantRows(t, s, "events", `{"k":1,"v":null}
{"k":2,"v":null}`)
	// The partial request is the one to events: the hung request to users,
	// released by ClearFaults, may be logged after it.
	log := s.Requests()
	var partial *felderatest.Request
	for i := range log {
		if log[i].Table == "events" {
			partial = &log[i]
		}
	}
	if partial == nil || partial.Status != 503 || partial.Inserts != 2 {
		t.Fatalf("request log: %+v", log)
	}
}

func TestQuery(t *testing.T) {
	_, c := newServer(t, nil)
	push(t, c, "users", `{"insert":{"id":2,"name":"b"}}
{"insert":{"id":1}}`)
	var got []string
	err := c.Query(ctx(t), "SELECT * FROM users ORDER BY id", func(r json.RawMessage) error {
		got = append(got, string(r))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":1,"name":null,"score":7,"tag":"none"}|{"id":2,"name":"b","score":7,"tag":"none"}`
	if strings.Join(got, "|") != want {
		t.Fatalf("query:\n got %s\nwant %s", strings.Join(got, "|"), want)
	}
	got = nil
	c.Query(ctx(t), `SELECT COUNT(*) FROM users`, func(r json.RawMessage) error { got = append(got, string(r)); return nil })
	if strings.Join(got, "") != `{"count(*)":2}` {
		t.Fatalf("count: %v", got)
	}
	got = nil
	c.Query(ctx(t), `SELECT "id" FROM "users"`, func(r json.RawMessage) error { got = append(got, string(r)); return nil })
	if strings.Join(got, "|") != `{"id":1}|{"id":2}` {
		t.Fatalf("key query: %v", got)
	}
	err = c.Query(ctx(t), "SELECT * FROM events", func(json.RawMessage) error { return nil })
	if !feldera.IsAdHocQueryError(err) || !strings.Contains(err.Error(), "non-materialized") {
		t.Fatalf("keyless, not materialized: %v", err)
	}
	if err := c.Query(ctx(t), "SELECT * FROM mat", func(json.RawMessage) error { return nil }); err != nil {
		t.Fatalf("materialized keyless: %v", err)
	}
	n := 0
	if err := c.Query(ctx(t), "SELECT * FROM table1", func(json.RawMessage) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("empty answer: n=%d err=%v", n, err)
	}
}

func TestTypes(t *testing.T) {
	s, c := newServer(t, nil)
	push(t, c, "typed", `{"insert":{"id":1,"d":"123.456","b":[222,173],"ts":"2024-01-01 12:00:00+05:30","f":1.5,"ok":true,"dt":"2024-02-29","tm":"12:34:56.789","u":"C32D330F-5757-4ADA-BCF6-1FAC2D54E37F","j":{"b":1,"a":[true,null]},"arr":[1,null,3]}}
{"insert":{"id":2,"d":12.5,"ts":"2024-01-01T00:00:00Z"}}`)
	wantRows(t, s, "typed", `{"arr":[1,null,3],"b":[222,173],"d":123.45,"dt":"2024-02-29","f":1.5,"id":1,"j":{"a":[true,null],"b":1},"ok":true,"tm":"12:34:56.789","ts":"2024-01-01T06:30:00","u":"c32d330f-5757-4ada-bcf6-1fac2d54e37f"}
{"arr":null,"b":null,"d":12.50,"dt":null,"f":null,"id":2,"j":null,"ok":null,"tm":null,"ts":"2024-01-01T00:00:00","u":null}`)
	for _, bad := range []string{
		`{"insert":{"id":3,"ts":"2024-01-01 12:00:00+00"}}`,
		`{"insert":{"id":3,"f":"NaN"}}`,
		`{"insert":{"id":3,"ok":"true"}}`,
		`{"insert":{"id":3,"ok":"t"}}`,
		`{"insert":{"id":3,"b":"\\xdead"}}`,
		`{"insert":{"id":3,"b":"3q0="}}`,
		`{"insert":{"id":3,"d":"1234.5"}}`,
		`{"insert":{"id":3,"dt":"2023-02-29"}}`,
		`{"insert":{"id":3,"id":null}}`,
		`{"insert":{"id":3,"u":"not-a-uuid"}}`,
		`{"insert":{"id":3,"tm":"25:00:00"}}`,
		`{"insert":{"id":3,"arr":[1,"x"]}}`,
		`{"insert":{"id":"3"}}`,
		`{"insert":{"id":3000000000}}`,
	} {
		if _, err := c.Ingress(ctx(t), "typed", []byte(bad)); !feldera.IsParseErrors(err) {
			t.Errorf("%s: want ParseErrors, got %v", bad, err)
		}
	}
	if n := len(s.Rows("typed")); n != 2 {
		t.Fatalf("a rejected event was applied: %d rows", n)
	}
}

func TestClient_QueryAcceptsArrayAndErrorLine(t *testing.T) {
	srv := newHandler(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("sql") {
		case "array":
			io.WriteString(w, `[{"id":1},{"id":2}]`)
		case "errline":
			io.WriteString(w, "{\"id\":1}\n{\"error\":\"boom\"}\n")
		}
	})
	c, _ := feldera.New(feldera.Config{URL: srv, Pipeline: "p"})
	n := 0
	if err := c.Query(ctx(t), "array", func(json.RawMessage) error { n++; return nil }); err != nil || n != 2 {
		t.Fatalf("array answer: n=%d err=%v", n, err)
	}
	if err := c.Query(ctx(t), "errline", func(json.RawMessage) error { return nil }); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("error line: %v", err)
	}
}

// A query answer may stream for longer than RequestTimeout (every key of a
// large table); only a silence that long fails it, and says so.
func TestClient_QueryLongAnswerVersusStall(t *testing.T) {
	srv := newHandler(t, func(w http.ResponseWriter, r *http.Request) {
		fl := w.(http.Flusher)
		rows := 6
		if r.URL.Query().Get("sql") == "stall" {
			rows = 1
		}
		for i := 0; i < rows; i++ {
			fmt.Fprintf(w, "{\"id\":%d}\n", i)
			fl.Flush()
			time.Sleep(100 * time.Millisecond)
		}
		if rows == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
	})
	c, _ := feldera.New(feldera.Config{URL: srv, Pipeline: "p", RequestTimeout: 300 * time.Millisecond})
	n := 0
	if err := c.Query(ctx(t), "long", func(json.RawMessage) error { n++; return nil }); err != nil || n != 6 {
		t.Fatalf("600 ms answer with 300 ms RequestTimeout: n=%d err=%v", n, err)
	}
	// The stalled answer would end cleanly after 5 s: only the client's
	// stall check turns it into an error.
	err := c.Query(ctx(t), "stall", func(json.RawMessage) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("stalled answer: err=%v", err)
	}
}

// StepsOnPoll: pushed data is neither visible nor complete until a client
// asks for a token's completion, and a restart drops what no step took.
func TestStepsOnPoll(t *testing.T) {
	s, c := newServer(t, func(c *felderatest.Config) { c.StepsOnPoll = true; c.FaultTolerance = "{}" })
	tok := push(t, c, "users", `{"insert":{"id":1}}`) // push waits for completion: stepped
	if _, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":2}}`)); err != nil {
		t.Fatal(err)
	}
	wantRows(t, s, "users", `{"id":1,"name":null,"score":7,"tag":"none"}`)
	if done, err := c.Completion(ctx(t), tok); err != nil || !done {
		t.Fatalf("first token: %v %v", done, err)
	}
	wantRows(t, s, "users", `{"id":1,"name":null,"score":7,"tag":"none"}`+"\n"+`{"id":2,"name":null,"score":7,"tag":"none"}`)
	if _, err := c.Ingress(ctx(t), "users", []byte(`{"insert":{"id":3}}`)); err != nil {
		t.Fatal(err)
	}
	s.Restart() // fault tolerant: completed state stays, id 3 was never stepped
	wantRows(t, s, "users", `{"id":1,"name":null,"score":7,"tag":"none"}`+"\n"+`{"id":2,"name":null,"score":7,"tag":"none"}`)
	reqs := s.Requests()
	if last := reqs[len(reqs)-1]; last.Lines != 1 || len(last.InsertKeys) != 1 || last.InsertKeys[0] != "3" {
		t.Fatalf("request log: %+v", last)
	}
}

// Held and LateApplied show a hanging request was held, and applied after
// its client gave up.
func TestFaults_HeldAndLateApplied(t *testing.T) {
	s, _ := newServer(t, nil)
	s.InjectFault(felderatest.Fault{Kind: felderatest.HangThenApply, Path: "ingress", Count: 1})
	hc := &http.Client{Timeout: 200 * time.Millisecond}
	_, err := hc.Post(s.URL+"/v0/pipelines/p1/ingress/users?format=json", "application/json", strings.NewReader(`{"insert":{"id":9}}`))
	if err == nil {
		t.Fatal("the held request was answered")
	}
	if s.Held() != 1 || s.LateApplied() != 0 {
		t.Fatalf("held %d, late %d", s.Held(), s.LateApplied())
	}
	// The server notices the client left a moment later.
	for deadline := time.Now().Add(5 * time.Second); s.HeldAbandoned() == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
	}
	if s.HeldAbandoned() != 1 {
		t.Fatalf("held %d, of which the server saw %d abandoned", s.Held(), s.HeldAbandoned())
	}
	s.ClearFaults()
	// Applied late means processed by a step: once it counts, the row
	// shows.
	for deadline := time.Now().Add(5 * time.Second); s.LateApplied() == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
	}
	if s.Held() != 0 || s.LateApplied() != 1 || len(s.Rows("users")) != 1 {
		t.Fatalf("after release: held %d, late %d, rows %d", s.Held(), s.LateApplied(), len(s.Rows("users")))
	}
}

// The double's order check sees rows that reach it out of commit order,
// and its queue peak sees requests in flight together.
func TestOrderColumnAndPeakQueued(t *testing.T) {
	s, c := newServer(t, func(cfg *felderatest.Config) { cfg.OrderColumn = "score" })
	s.HoldCompletion(true)
	for _, body := range []string{
		`{"insert":{"id":1,"score":1}}`,
		`{"insert":{"id":1,"score":3}}` + "\n" + `{"insert":{"id":2,"score":5}}`,
		`{"delete":{"id":1}}`,
		`{"insert":{"id":1,"score":3}}`, // the same version again: in order
		`{"insert":{"id":1,"score":2}}`, // older than one applied: out of order
		`{"insert":{"id":2,"score":null}}`,
	} {
		if _, err := c.Ingress(ctx(t), "users", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if got, rows := s.PeakQueued(), s.PeakQueuedRecords(); got != 6 || rows != 7 {
		t.Fatalf("peak queued %d requests, %d records; want 6 and 7", got, rows)
	}
	if got := s.OrderViolations(); got != 0 {
		t.Fatalf("%d violations before any step ran", got)
	}
	s.HoldCompletion(false)
	push(t, c, "users", `{"insert":{"id":3,"score":0}}`)
	if got := s.OrderViolations(); got != 1 {
		t.Fatalf("order violations %d, want 1", got)
	}
}

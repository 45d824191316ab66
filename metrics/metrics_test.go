package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/metrics"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func metric(body, name string) string {
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimPrefix(line, name+" ")
		}
	}
	return ""
}

// A workload moves the key series; /readyz is not ready while Feldera
// fails and ready again after it recovers.
func TestMetricsAndReadiness(t *testing.T) {
	c := pgcluster.Shared(t)
	dsn := c.NewDB(t)
	ctx := context.Background()
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	if err := c.Exec(ctx, db, `CREATE TABLE users (id bigint PRIMARY KEY, name text); CREATE PUBLICATION pub FOR TABLE users;`); err != nil {
		t.Fatal(err)
	}
	fel, _ := felderatest.NewServer(felderatest.Config{Pipeline: "p", Tables: felderatest.MustParseDDL(`CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR);`)})
	defer fel.Close()
	client, _ := feldera.New(feldera.Config{URL: fel.URL, Pipeline: "p", RetryMax: -1, RequestTimeout: 5 * time.Second})
	m := metrics.New(dsn, "metrics_slot", slog.New(slog.NewTextHandler(io.Discard, nil)))
	tables, _ := connector.ParseTables("users")
	conn, err := connector.New(connector.Config{DSN: dsn, Publication: "pub", Slot: "metrics_slot", Tables: tables,
		SnapshotMode: connector.SnapshotNever, RequirePrimaryKey: true, BatchLinger: 10 * time.Millisecond,
		BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond, CompletionTimeout: 5 * time.Second,
		IngressFence: 3 * time.Second, Observer: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, client)
	if err != nil {
		t.Fatal(err)
	}
	m.Attach(conn)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	if code, _ := get(t, srv, "/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- conn.Run(rctx) }()
	defer func() { cancel(); <-done }()
	waitReady := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if code, _ := get(t, srv, "/readyz"); (code == 200) == want {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		code, body := get(t, srv, "/readyz")
		t.Fatalf("/readyz = %d %q, want ready=%v", code, body, want)
	}
	waitReady(true)
	if err := c.Exec(ctx, db, "INSERT INTO users SELECT g, 'x' FROM generate_series(1, 100) g; DELETE FROM users WHERE id <= 10"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var body string
	for time.Now().Before(deadline) {
		_, body = get(t, srv, "/metrics")
		if metric(body, `pgfeldera_rows_total{op="delete",table="users"}`) == "10" && metric(body, "pgfeldera_flushed_lsn") == metric(body, "pgfeldera_received_lsn") && metric(body, "pgfeldera_batches_total") != "0" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for name, want := range map[string]string{
		`pgfeldera_rows_total{op="insert",table="users"}`: "100",
		`pgfeldera_rows_total{op="delete",table="users"}`: "10",
		`pgfeldera_sessions_total`:                        "1",
		`pgfeldera_ready`:                                 "1",
		`pgfeldera_ingress_fence_seconds`:                 "0",
	} {
		if got := metric(body, name); got != want {
			t.Errorf("%s = %q, want %s", name, got, want)
		}
	}
	for _, name := range []string{"pgfeldera_batches_total", "pgfeldera_flushed_lsn", "pgfeldera_received_lsn", "pgfeldera_batch_rows_count"} {
		if v := metric(body, name); v == "" || v == "0" {
			t.Errorf("%s did not move: %q", name, v)
		}
	}
	// Feldera fails: not ready; it recovers: ready again.
	fel.InjectFault(felderatest.Fault{Kind: felderatest.FailStatus, Path: "ingress", Status: 503})
	c.Exec(ctx, db, "INSERT INTO users VALUES (1000, 'during outage')")
	waitReady(false)
	_, body = get(t, srv, "/metrics")
	if metric(body, `pgfeldera_feldera_errors_total{code="PipelineUnavailable"}`) == "" {
		t.Errorf("feldera errors not counted:\n%s", body)
	}
	if v := metric(body, "pgfeldera_ingress_fence_seconds"); v == "" || v == "0" {
		t.Errorf("a 503 (outcome unknown) should fence ingress: pgfeldera_ingress_fence_seconds = %q", v)
	}
	fel.ClearFaults()
	waitReady(true)
}

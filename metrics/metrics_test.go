package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/internal/waitfor"
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
	pgcluster.EveryVersion(t)
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
	tables, _ := catalog.ParseTables("users")
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
	// Exported; whether a batch needed a Feldera transaction depends on
	// where the linger deadline cut the load, so only their presence.
	for _, name := range []string{"pgfeldera_feldera_transactions_total", "pgfeldera_feldera_transaction_conflicts_total"} {
		if metric(body, name) == "" {
			t.Errorf("%s is not exported", name)
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

// The series the first test does not move: the snapshot estimate and
// /readyz while copying and while the copy is blocked; /readyz while a
// flush is blocked; the slot gauges Postgres reports; the POST and
// completion histograms; reconnects by cause; retraction deletes.
func TestMetrics_SnapshotBlockedSlotAndCauses(t *testing.T) {
	pgcluster.EveryVersion(t)
	c := pgcluster.Shared(t)
	dsn := c.NewDB(t)
	ctx := context.Background()
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	if err := c.Exec(ctx, db, `CREATE TABLE users (id bigint PRIMARY KEY, name text);
		INSERT INTO users SELECT g, 'pre' FROM generate_series(1, 3000) g; ANALYZE users;
		CREATE PUBLICATION pub FOR TABLE users;`); err != nil {
		t.Fatal(err)
	}
	fel, _ := felderatest.NewServer(felderatest.Config{Pipeline: "p", Tables: felderatest.MustParseDDL(`CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR) WITH ('materialized' = 'true');`)})
	defer fel.Close()
	client, _ := feldera.New(feldera.Config{URL: fel.URL, Pipeline: "p", RetryMax: -1, RequestTimeout: 5 * time.Second})
	m := metrics.New(dsn, "metrics_slot2", slog.New(slog.NewTextHandler(io.Discard, nil)))
	tables, _ := catalog.ParseTables("users")
	conn, err := connector.New(connector.Config{DSN: dsn, Publication: "pub", Slot: "metrics_slot2", Tables: tables,
		SnapshotMode: connector.SnapshotInitial, RequirePrimaryKey: true, BatchLinger: 10 * time.Millisecond, BatchMaxRows: 100,
		StateFile: t.TempDir() + "/state.json", BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		CompletionTimeout: 30 * time.Second, IngressFence: 3 * time.Second, ReadyBlockedFor: time.Second,
		Observer: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, client)
	if err != nil {
		t.Fatal(err)
	}
	m.Attach(conn)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	readyz := func(wantCode int, wantBody string) {
		t.Helper()
		var code int
		var body string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if code, body = get(t, srv, "/readyz"); code == wantCode && strings.Contains(body, wantBody) {
				return
			}
		}
		t.Fatalf("/readyz = %d %q, want %d %q", code, body, wantCode, wantBody)
	}
	scrape := func(what string, cond func(body string) bool) string {
		t.Helper()
		var body string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			m.ReadSlot(ctx)
			if _, body = get(t, srv, "/metrics"); cond(body) {
				return body
			}
		}
		t.Fatalf("%s never held:\n%s", what, body)
		return ""
	}

	// The copy blocks on its first batch: not ready once it has made no
	// progress for ReadyBlockedFor; released, it is ready while copying.
	fel.HoldCompletion(true)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- conn.Run(rctx) }()
	defer func() { cancel(); <-done }()
	readyz(503, "snapshot made no progress for 1s")
	body := scrape("the snapshot estimate", func(b string) bool { return metric(b, `pgfeldera_snapshot_rows_estimated{table="users"}`) == "3000" })
	if v := metric(body, "pgfeldera_ready"); v != "0" {
		t.Errorf("pgfeldera_ready = %q while the snapshot is blocked", v)
	}
	fel.SetCompletionDelay(30 * time.Millisecond) // 30 batches: the copy takes about a second
	fel.HoldCompletion(false)
	readyz(200, "snapshotting")
	readyz(200, "streaming")

	// A flush blocked in Feldera: not ready after ReadyBlockedFor.
	fel.SetCompletionDelay(0)
	fel.HoldCompletion(true)
	c.Exec(ctx, db, "INSERT INTO users VALUES (5000, 'held')")
	readyz(503, "a flush has been waiting for Feldera for over 1s")
	fel.HoldCompletion(false)
	readyz(200, "streaming")

	// Postgres's view of the slot, and the latency histograms.
	body = scrape("the slot gauges", func(b string) bool {
		return metric(b, `pgfeldera_slot_wal_status{status="reserved"}`) == "1" && metric(b, "pgfeldera_confirmed_lsn") == metric(b, "pgfeldera_flushed_lsn")
	})
	for _, name := range []string{"pgfeldera_confirmed_lsn", "pgfeldera_slot_retained_wal_bytes", "pgfeldera_post_seconds_count", "pgfeldera_completion_wait_seconds_count"} {
		if v := metric(body, name); v == "" || v == "0" {
			t.Errorf("%s did not move: %q", name, v)
		}
	}
	for name, want := range map[string]string{
		"pgfeldera_lag_bytes":                               "0", // caught up
		"pgfeldera_slot_safe_wal_size_bytes":                "0", // max_slot_wal_keep_size = -1: no limit, reported null
		`pgfeldera_slot_wal_status{status="lost"}`:          "0",
		`pgfeldera_rows_total{op="snapshot",table="users"}`: "3000",
		`pgfeldera_ack_gate{gate="complete"}`:               "1", // no fault tolerance
		`pgfeldera_ack_gate{gate="checkpoint"}`:             "0",
		"pgfeldera_checkpoint_wait_seconds":                 "0",
		"pgfeldera_checkpoint_wait_wal_bytes":               "0",
	} {
		if got := metric(body, name); got != want {
			t.Errorf("%s = %q, want %s", name, got, want)
		}
	}

	// A terminated walsender is a reconnect caused by Postgres.
	if err := c.Exec(ctx, db, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'metrics_slot2'"); err != nil {
		t.Fatal(err)
	}
	scrape("a reconnect counted", func(b string) bool { return metric(b, `pgfeldera_reconnects_total{cause="postgres"}`) == "1" })
	readyz(200, "streaming")

	// TRUNCATE retracts every row Feldera holds, counted.
	c.Exec(ctx, db, "TRUNCATE users")
	scrape("the retraction counted", func(b string) bool { return metric(b, "pgfeldera_retraction_deletes_total") == "3001" })
	// A delete is counted as it is buffered; the last batch of them shows
	// in Feldera once the step that takes it ends.
	rows := func() int { return len(fel.Rows("users")) }
	if !waitfor.Until(10*time.Second, 10*time.Millisecond, rows, func() bool { return rows() == 0 }) {
		t.Fatalf("feldera holds %d rows after TRUNCATE", rows())
	}
}

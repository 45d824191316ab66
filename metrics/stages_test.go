package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/metrics"
)

// pgfeldera_stage_seconds times every source transaction once per stage,
// and each delay shows in its own stage: a slow completion between sent
// and complete, a late checkpoint (under at_least_once) between complete
// and durable. Lower bounds only: load can only add time.
func TestMetrics_StageLatency(t *testing.T) {
	pgcluster.AnyVersion(t)
	const txns = 12
	for _, c := range []struct {
		name       string
		completion time.Duration // the double's completion delay
		checkpoint time.Duration // CheckpointAfter under at_least_once; 0: no fault tolerance
	}{
		{"slow_completion", 1500 * time.Millisecond, 0},
		{"late_checkpoint", 0, 3 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			mean := stageMeans(t, txns, c.completion, c.checkpoint)
			sent, complete, durable, acked := mean["sent"], mean["complete"], mean["durable"], mean["acked"]
			if !(sent <= complete && complete <= durable && durable <= acked) {
				t.Fatalf("stage means out of order: %v", mean)
			}
			t.Logf("means (s): %v", mean)
			visible, kept := complete-sent, durable-complete
			switch {
			case c.completion > 0 && (visible < c.completion.Seconds()/2 || visible <= kept):
				t.Errorf("a %v completion delay: complete-sent = %.3fs, durable-complete = %.3fs (means %v)", c.completion, visible, kept, mean)
			case c.checkpoint > 0 && (kept < c.checkpoint.Seconds()/2 || kept <= visible):
				t.Errorf("a checkpoint after %v: durable-complete = %.3fs, complete-sent = %.3fs (means %v)", c.checkpoint, kept, visible, mean)
			}
		})
	}
}

// stageMeans streams n one-row transactions through a connector and
// returns each stage's mean time, once every stage has timed all n.
func stageMeans(t *testing.T, n int, completion, checkpoint time.Duration) map[string]float64 {
	c := pgcluster.Shared(t)
	dsn := c.NewDB(t)
	ctx := context.Background()
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	if err := c.Exec(ctx, db, `CREATE TABLE users (id bigint PRIMARY KEY, name text); CREATE PUBLICATION pub FOR TABLE users;`); err != nil {
		t.Fatal(err)
	}
	cfg := felderatest.Config{Pipeline: "p", Tables: felderatest.MustParseDDL(`CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR);`)}
	if checkpoint > 0 {
		// Checkpoints only when asked: the connector asks once completed
		// work has waited CheckpointAfter.
		cfg.FaultTolerance = `{"model": "at_least_once", "checkpoint_interval_secs": null}`
	}
	fel, err := felderatest.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer fel.Close()
	fel.SetCompletionDelay(completion)
	client, _ := feldera.New(feldera.Config{URL: fel.URL, Pipeline: "p", RequestTimeout: 5 * time.Second})
	slot := fmt.Sprintf("stage_%s", db)
	m := metrics.New(dsn, slot, slog.New(slog.NewTextHandler(io.Discard, nil)))
	tables, _ := catalog.ParseTables("users")
	conn, err := connector.New(connector.Config{DSN: dsn, Publication: "pub", Slot: slot, Tables: tables,
		SnapshotMode: connector.SnapshotNever, RequirePrimaryKey: true, BatchLinger: 10 * time.Millisecond,
		CompletionTimeout: 30 * time.Second, CheckpointAfter: max(checkpoint, time.Second), CheckpointWAL: -1,
		Observer: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, client)
	if err != nil {
		t.Fatal(err)
	}
	m.Attach(conn)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- conn.Run(rctx) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(30 * time.Second); !ready(conn); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the connector never streamed")
		}
	}
	for i := 1; i <= n; i++ {
		if err := c.Exec(ctx, db, "INSERT INTO users VALUES ($1, 'x')", i); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var body string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		_, body = get(t, srv, "/metrics")
		if metric(body, `pgfeldera_stage_seconds_count{stage="acked"}`) == strconv.Itoa(n) {
			break
		}
	}
	mean := map[string]float64{}
	for _, st := range connector.Stages() {
		count := metric(body, `pgfeldera_stage_seconds_count{stage="`+st+`"}`)
		if count != strconv.Itoa(n) {
			t.Fatalf("stage %s timed %q transactions, want %d:\n%s", st, count, n, body)
		}
		sum, err := strconv.ParseFloat(metric(body, `pgfeldera_stage_seconds_sum{stage="`+st+`"}`), 64)
		if err != nil {
			t.Fatalf("stage %s: %v", st, err)
		}
		mean[st] = sum / float64(n)
	}
	// What pgfeldera status reads from a running process: the same.
	read, err := metrics.ReadStages(ctx, srv.URL+"/metrics")
	if err != nil || len(read) != len(connector.Stages()) {
		t.Fatalf("ReadStages: %v, %+v", err, read)
	}
	for i, st := range read {
		if st.Stage != connector.Stages()[i] || st.Count != uint64(n) || math.Abs(st.Mean-mean[st.Stage]) > 1e-9 || st.P50 < st.Mean/2 || st.P99 < st.P50 {
			t.Errorf("ReadStages: %+v, want stage %s, %d transactions, mean %g", st, connector.Stages()[i], n, mean[st.Stage])
		}
	}
	return mean
}

func ready(c *connector.Connector) bool {
	ok, _ := c.Ready()
	return ok
}

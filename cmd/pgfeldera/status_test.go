package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
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

func TestMain(m *testing.M) { pgcluster.Main(m) }

func TestStatus(t *testing.T) {
	pgcluster.EveryVersion(t)
	c := pgcluster.Shared(t)
	dsn := c.NewDB(t)
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	ctx := context.Background()
	if err := c.Exec(ctx, db, `CREATE TABLE users (id bigint PRIMARY KEY, name text);
		INSERT INTO users SELECT g, 'x' FROM generate_series(1, 42) g;
		CREATE PUBLICATION pub FOR TABLE users;`); err != nil {
		t.Fatal(err)
	}
	fel, err := felderatest.NewServer(felderatest.Config{Pipeline: "p", Tables: felderatest.MustParseDDL(`CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR);`)})
	if err != nil {
		t.Fatal(err)
	}
	defer fel.Close()
	stateFile := filepath.Join(t.TempDir(), "state.json")
	vars := map[string]string{"PG_DSN": dsn, "PG_PUBLICATION": "pub", "PG_SLOT": "status_slot", "TABLES": "users",
		"FELDERA_URL": fel.URL, "FELDERA_PIPELINE": "p", "STATE_FILE": stateFile}
	status := func() (int, Status, string) { return statusJSON(ctx, vars) }
	// Before the first run: no slot → non-zero exit.
	if code, st, msg := status(); code == 0 || st.Slot.Exists || !strings.Contains(msg, "status_slot") {
		t.Fatalf("no slot: code=%d exists=%v msg=%q", code, st.Slot.Exists, msg)
	}
	// Run the connector until it has snapshotted, then look again.
	client, _ := feldera.New(feldera.Config{URL: fel.URL, Pipeline: "p"})
	tables, _ := catalog.ParseTables("users")
	m := metrics.New(dsn, "status_slot", slog.New(slog.NewTextHandler(io.Discard, nil)))
	conn, err := connector.New(connector.Config{DSN: dsn, Publication: "pub", Slot: "status_slot", Tables: tables,
		RequirePrimaryKey: true, StateFile: stateFile, SnapshotMode: connector.SnapshotInitial, Observer: m,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, client)
	if err != nil {
		t.Fatal(err)
	}
	m.Attach(conn)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	vars["HTTP_ADDR"] = strings.TrimPrefix(srv.URL, "http://")
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- conn.Run(rctx) }()
	// Poll until the snapshot is complete, the slot active with a
	// confirmed position, Feldera holds every row, and a streamed
	// transaction was acknowledged: then look.
	inserted := false
	var (
		code int
		st   Status
		msg  string
	)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, st, msg = status()
		ready := code == 0 && st.Slot.Active && st.Slot.ConfirmedFlushLSN != nil &&
			len(st.State.Tables) == 1 && st.State.Tables[0].Status == "complete" &&
			len(st.Tables) == 1 && st.Tables[0].FelderaRows != nil && *st.Tables[0].FelderaRows == 42+btoi(inserted)
		if ready && !inserted {
			if err := c.Exec(ctx, db, "INSERT INTO users VALUES (43, 'streamed')"); err != nil {
				t.Fatal(err)
			}
			inserted = true
			continue
		}
		if ready && len(st.Stages) == 4 && st.Stages[3].Count == 1 || time.Now().After(deadline) {
			break
		}
	}
	cancel()
	<-done
	if code != 0 || !st.Slot.Exists || !st.Slot.Active || st.Slot.ConfirmedFlushLSN == nil || st.Slot.WalStatus == nil {
		t.Fatalf("code=%d %q slot=%+v", code, msg, st.Slot)
	}
	if f := st.State.Fence; f == nil || !f.Running || f.PID != os.Getpid() {
		t.Fatalf("fence while running: %+v", f)
	}
	if pg := st.Postgres; pg.Setting != "logical" || pg.Version < 150000 || pg.Note != "" {
		t.Fatalf("postgres section: %+v", pg)
	}
	if st.Feldera.Model != "none" || st.Feldera.AckGate != "complete" {
		t.Fatalf("fault tolerance %q, ack gate %q; want none, complete", st.Feldera.Model, st.Feldera.AckGate)
	}
	if len(st.State.Tables) != 1 || st.State.Tables[0].Status != "complete" || st.Feldera.DeploymentStatus != "Running" {
		t.Fatalf("state=%+v feldera=%+v", st.State, st.Feldera)
	}
	if len(st.Tables) != 1 || st.Tables[0].PostgresRows == nil || *st.Tables[0].PostgresRows != 43 || st.Tables[0].FelderaRows == nil || *st.Tables[0].FelderaRows != 43 {
		t.Fatalf("tables=%+v", st.Tables)
	}
	// The running process's stage times: the streamed transaction, timed
	// once at each stage, in order.
	if len(st.Stages) != 4 || st.StagesError != "" {
		t.Fatalf("stages=%+v %q", st.Stages, st.StagesError)
	}
	for i, s := range st.Stages {
		if s.Stage != connector.Stages()[i] || s.Count != 1 || i > 0 && s.Mean < st.Stages[i-1].Mean {
			t.Fatalf("stages=%+v", st.Stages)
		}
	}
	// The text form names the same things.
	var out bytes.Buffer
	run(ctx, func() {}, []string{"status"}, env(vars), &out, io.Discard)
	if !strings.Contains(out.String(), "confirmed_flush_lsn") || !strings.Contains(out.String(), "public.users → users") ||
		!strings.Contains(out.String(), "wal_level=logical") || !strings.Contains(out.String(), "(1 transactions)") {
		t.Fatalf("text status:\n%s", out.String())
	}
}

// A slot whose WAL is gone: status says the next run resnapshots and
// exits 1, as it does for a missing slot.
func TestStatus_LostSlotExits1(t *testing.T) {
	pgcluster.EveryVersion(t)
	c := pgcluster.New(t, pgcluster.Options{Settings: pgcluster.LoseSlotSettings})
	dsn := c.NewDB(t)
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	ctx := context.Background()
	if err := c.Exec(ctx, db, `CREATE TABLE users (id bigint PRIMARY KEY, name text);
		CREATE PUBLICATION pub FOR TABLE users;`); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, db, `SELECT pg_create_logical_replication_slot('lost_slot', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	fel, err := felderatest.NewServer(felderatest.Config{Pipeline: "p", Tables: felderatest.MustParseDDL(`CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR);`)})
	if err != nil {
		t.Fatal(err)
	}
	defer fel.Close()
	vars := map[string]string{"PG_DSN": dsn, "PG_PUBLICATION": "pub", "PG_SLOT": "lost_slot", "TABLES": "users",
		"FELDERA_URL": fel.URL, "FELDERA_PIPELINE": "p", "STATE_FILE": filepath.Join(t.TempDir(), "state.json")}
	status := func() (int, Status, string) { return statusJSON(ctx, vars) }
	if code, st, msg := status(); code != 0 || !st.Slot.Exists {
		t.Fatalf("a healthy slot: code=%d slot=%+v %q", code, st.Slot, msg)
	}
	if err := c.LoseSlot(ctx, db, "lost_slot"); err != nil {
		t.Fatal(err)
	}
	code, st, msg := status()
	if code != 1 || st.Slot.WalStatus == nil || *st.Slot.WalStatus != "lost" || !strings.Contains(msg, "missing or lost") {
		t.Fatalf("a lost slot: code=%d slot=%+v %q", code, st.Slot, msg)
	}
}

// statusJSON runs `pgfeldera status --json` with vars as the environment:
// the exit code, the parsed answer and what it printed on stderr.
func statusJSON(ctx context.Context, vars map[string]string) (int, Status, string) {
	var out, errb bytes.Buffer
	code := run(ctx, func() {}, []string{"status", "--json"}, env(vars), &out, &errb)
	var st Status
	json.Unmarshal(out.Bytes(), &st)
	return code, st, errb.String()
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/state"
)

// check against a database with eight different problems names all eight,
// each with its fix, and exits 2; with them fixed it exits 0, and run
// starts and snapshots every table.
func TestCheck_EveryProblemAtOnce(t *testing.T) {
	pgcluster.AnyVersion(t)
	c := pgcluster.Shared(t)
	dsn := c.NewDB(t)
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	role := fmt.Sprintf("checker_%d", os.Getpid())
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		if err := c.Exec(ctx, db, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`
		CREATE TABLE users (id bigint PRIMARY KEY, name text);
		CREATE TABLE orders (id bigint PRIMARY KEY, amount numeric(10,2));
		CREATE TABLE events (id bigint NOT NULL, payload text);
		CREATE TABLE prices (id bigint PRIMARY KEY, price text);
		CREATE TABLE notes (id bigint PRIMARY KEY, body text);
		INSERT INTO users VALUES (1, 'a'); INSERT INTO orders VALUES (1, 2.50); INSERT INTO events VALUES (1, 'e');
		INSERT INTO prices VALUES (1, '3'); INSERT INTO notes VALUES (1, 'n');
		CREATE PUBLICATION pub FOR TABLE users, events, prices, notes WITH (publish = 'insert, update');
		CREATE ROLE ` + role + ` LOGIN;
		GRANT SELECT ON orders, events, prices, notes TO ` + role)
	u, _ := url.Parse(dsn)
	u.User = url.User(role)
	felDDL := `
		CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR);
		CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, amount DECIMAL(10,2));
		CREATE TABLE events (id BIGINT NOT NULL PRIMARY KEY, payload VARCHAR);`
	fel := newDouble(t, felDDL+`CREATE TABLE prices (id BIGINT NOT NULL PRIMARY KEY, price INT);`)
	stateFile := filepath.Join(t.TempDir(), "state.json")
	vars := map[string]string{"PG_DSN": u.String(), "PG_PUBLICATION": "pub", "PG_SLOT": "check_slot",
		"TABLES": "users,orders,events,prices,notes", "FELDERA_URL": fel.URL, "FELDERA_PIPELINE": "p",
		"STATE_FILE": stateFile, "HTTP_ADDR": "off", "BATCH_LINGER_MS": "0"}
	other, err := state.Lock(stateFile) // another process runs on this state file
	if err != nil {
		t.Fatal(err)
	}

	code, report, out := check(t, vars)
	want := []struct{ subject, what, fix string }{
		{"PG_PUBLICATION", `publication "pub" does not publish delete`, `ALTER PUBLICATION "pub" SET (publish`},
		{"public.orders", "not in publication", `ALTER PUBLICATION "pub" ADD TABLE "public"."orders"`},
		{"public.events", "REPLICA IDENTITY DEFAULT and no usable key", "REPLICA IDENTITY FULL"},
		{"public.prices.price", "Postgres type text has no faithful encoding into Feldera type INTEGER", ""},
		{"public.notes", "has no table notes", "pgfeldera ddl"},
		{"public.users", "has no SELECT on public.users", `GRANT SELECT ON "public"."users"`},
		{"PG_DSN", "replication connection", `ALTER ROLE "` + role + `" REPLICATION`},
		{"STATE_FILE", "is in use by pid", ""},
	}
	if code != exitConfig || len(report.Problems) != len(want) {
		t.Fatalf("check: exit %d with %d problems, want %d with %d:\n%s", code, len(report.Problems), exitConfig, len(want), out)
	}
	for _, w := range want {
		found := false
		for _, p := range report.Problems {
			found = found || p.Subject == w.subject && strings.Contains(p.What, w.what) && strings.Contains(p.Fix, w.fix)
		}
		if !found {
			t.Errorf("no problem of %s naming %q with the fix %q:\n%s", w.subject, w.what, w.fix, out)
		}
	}

	other.Unlock()
	exec(`ALTER PUBLICATION pub SET (publish = 'insert, update, delete, truncate');
		ALTER PUBLICATION pub ADD TABLE orders;
		ALTER TABLE events ADD PRIMARY KEY (id);
		GRANT SELECT ON users TO ` + role + `;
		ALTER ROLE ` + role + ` REPLICATION`)
	fel = newDouble(t, felDDL+`CREATE TABLE prices (id BIGINT NOT NULL PRIMARY KEY, price VARCHAR);
		CREATE TABLE notes (id BIGINT NOT NULL PRIMARY KEY, body VARCHAR);`)
	vars["FELDERA_URL"] = fel.URL
	if code, report, out := check(t, vars); code != exitOK || !report.OK() || report.Tables != 5 || report.Gate != "complete" {
		t.Fatalf("check after the fixes: exit %d, %+v:\n%s", code, report, out)
	}

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	var logs bytes.Buffer
	go func() { done <- run(rctx, func() {}, []string{"run"}, env(vars), &logs, &logs) }()
	deadline := time.Now().Add(60 * time.Second)
	for _, table := range []string{"users", "orders", "events", "prices", "notes"} {
		for len(fel.Rows(table)) < 1 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("run: exit %d:\n%s", code, logs.String())
	}
	for _, table := range []string{"users", "orders", "events", "prices", "notes"} {
		if n := len(fel.Rows(table)); n != 1 {
			t.Errorf("Feldera table %s has %d rows after run, want 1", table, n)
		}
	}
}

// check runs pgfeldera check --json.
func check(t *testing.T, vars map[string]string) (int, setup.CheckReport, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), func() {}, []string{"check", "--json"}, env(vars), &out, &errb)
	var r setup.CheckReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("check --json: exit %d: %v:\n%s\n%s", code, err, out.String(), errb.String())
	}
	var text bytes.Buffer
	run(context.Background(), func() {}, []string{"check"}, env(vars), &text, &errb)
	return code, r, text.String()
}

func newDouble(t *testing.T, ddl string) *felderatest.Server {
	t.Helper()
	fel, err := felderatest.NewServer(felderatest.Config{Pipeline: "p", Tables: felderatest.MustParseDDL(ddl)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fel.Close)
	return fel
}

// usersDB is a new database of the shared cluster with a keyed table
// users in publication pub.
func usersDB(t *testing.T) string {
	t.Helper()
	pgcluster.AnyVersion(t)
	c := pgcluster.Shared(t)
	dsn := c.NewDB(t)
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	if err := c.Exec(context.Background(), db, `CREATE TABLE users (id bigint PRIMARY KEY, name text);
		CREATE PUBLICATION pub FOR TABLE users`); err != nil {
		t.Fatal(err)
	}
	return dsn
}

// check names a table in TABLES that does not exist as missing (not as
// one to add to the publication, which would fail), and a pipeline name
// Feldera does not know once, with a fix; one problem reads "1 problem".
func TestCheck_MissingTableAndWrongPipeline(t *testing.T) {
	dsn := usersDB(t)
	fel := newDouble(t, `CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR);`)
	vars := map[string]string{"PG_DSN": dsn, "PG_PUBLICATION": "pub", "PG_SLOT": "check_missing",
		"TABLES": "users,ghost", "FELDERA_URL": fel.URL, "FELDERA_PIPELINE": "p",
		"STATE_FILE": filepath.Join(t.TempDir(), "state.json"), "HTTP_ADDR": "off"}
	code, report, out := check(t, vars)
	if code != exitConfig || len(report.Problems) != 1 {
		t.Fatalf("check: exit %d with %d problems, want %d with 1:\n%s", code, len(report.Problems), exitConfig, out)
	}
	if p := report.Problems[0]; p.Subject != "public.ghost" || !strings.Contains(p.What, "does not exist") || !strings.Contains(p.Fix, "TABLES") {
		t.Errorf("the missing table: %+v", p)
	}
	if !strings.Contains(out, "1 problem:") {
		t.Errorf("one problem is not reported as one:\n%s", out)
	}

	vars["TABLES"], vars["FELDERA_PIPELINE"] = "users", "nosuch"
	code, report, out = check(t, vars)
	if code != exitConfig || len(report.Problems) != 1 {
		t.Fatalf("check with a wrong pipeline: exit %d with %d problems:\n%s", code, len(report.Problems), out)
	}
	p := report.Problems[0]
	if p.Subject != "FELDERA_PIPELINE" || !strings.Contains(p.Fix, "FELDERA_PIPELINE") || strings.Count(out, "read feldera pipeline") != 1 {
		t.Errorf("the wrong pipeline: %+v\n%s", p, out)
	}
}

// check says what a user gets of replays: exactly once when the
// pipeline declares the progress table (the default, auto, uses it), at
// least once with the way to exact replays when it does not, and a
// problem naming the table when it is declared in a shape pgfeldera
// cannot write.
func TestCheck_SaysWhetherReplaysAreExact(t *testing.T) {
	dsn := usersDB(t)
	const users = `CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR);`
	for _, tc := range []struct {
		name, ddl, setting string
		exact              bool
		want               string // in the replays line, or in the problem
		problem            bool
	}{
		{"declared", users + setup.ProgressDDL, "", true, "exactly once", false},
		{"not declared", users, "", false, "declare it (`pgfeldera ddl` prints it)", false},
		{"off", users + setup.ProgressDDL, "off", false, "FELDERA_PROGRESS_TABLE=off", false},
		{"wrong shape", users + "CREATE TABLE pgfeldera_progress (slot VARCHAR NOT NULL PRIMARY KEY, lsn INT NOT NULL);", "", false, "lsn", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fel := newDouble(t, tc.ddl)
			vars := map[string]string{"PG_DSN": dsn, "PG_PUBLICATION": "pub", "PG_SLOT": "check_replays",
				"TABLES": "users", "FELDERA_URL": fel.URL, "FELDERA_PIPELINE": "p",
				"STATE_FILE": filepath.Join(t.TempDir(), "state.json"), "HTTP_ADDR": "off"}
			if tc.setting != "" {
				vars["FELDERA_PROGRESS_TABLE"] = tc.setting
			}
			code, report, out := check(t, vars)
			if tc.problem {
				if code != exitConfig || len(report.Problems) != 1 || report.Problems[0].Subject != "FELDERA_PROGRESS_TABLE" || !strings.Contains(report.Problems[0].What, tc.want) {
					t.Fatalf("exit %d, problems %+v; want one about FELDERA_PROGRESS_TABLE naming %q\n%s", code, report.Problems, tc.want, out)
				}
				return
			}
			if code != exitOK || report.ExactlyOnce != tc.exact || !strings.Contains(report.Replays, tc.want) || !strings.Contains(out, "replays: "+report.Replays) {
				t.Fatalf("exit %d, exactly_once %v, replays %q; want %v and %q\n%s", code, report.ExactlyOnce, report.Replays, tc.exact, tc.want, out)
			}
		})
	}
}

// check names a fault-tolerant pipeline that reports no checkpoint can
// succeed, with the fix for each reason.
func TestCheck_PipelineThatCannotCheckpoint(t *testing.T) {
	dsn := usersDB(t)
	fel, err := felderatest.NewServer(felderatest.Config{Pipeline: "p", FaultTolerance: `{"model": "at_least_once"}`,
		Tables: felderatest.MustParseDDL(`CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR);`)})
	if err != nil {
		t.Fatal(err)
	}
	defer fel.Close()
	fel.SetPermanentCheckpointErrors(`"EnterpriseFeature"`)
	vars := map[string]string{"PG_DSN": dsn, "PG_PUBLICATION": "pub", "PG_SLOT": "check_ckpt",
		"TABLES": "users", "FELDERA_URL": fel.URL, "FELDERA_PIPELINE": "p",
		"STATE_FILE": filepath.Join(t.TempDir(), "state.json"), "HTTP_ADDR": "off"}
	code, report, out := check(t, vars)
	if code != exitConfig || len(report.Problems) != 1 {
		t.Fatalf("check: exit %d with %d problems, want %d with 1:\n%s", code, len(report.Problems), exitConfig, out)
	}
	if p := report.Problems[0]; p.Subject != "FELDERA_PIPELINE" || !strings.Contains(p.What, "EnterpriseFeature") || !strings.Contains(p.Fix, "Enterprise") {
		t.Fatalf("the problem: %+v", p)
	}
}

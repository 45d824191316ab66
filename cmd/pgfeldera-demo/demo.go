// Command pgfeldera-demo is what `pgfeldera demo` runs: a throwaway
// PostgreSQL and the Feldera double (or a real Feldera at FELDERA_URL),
// the connector in-process, a live workload and a final comparison. It is
// a program of its own so that pgfeldera, the binary users deploy, links
// no test harness: `make demo` builds both, and `pgfeldera demo` runs the
// one found beside it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// Exit codes, as pgfeldera's: 0 the demo's comparison matched, 2 a bad
// flag or setting, 1 anything else.
const (
	exitOK     = 0
	exitFatal  = 1
	exitConfig = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := runDemo(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const demoPG = `
CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, city text, created timestamptz NOT NULL DEFAULT now());
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL, amount numeric(10,2) NOT NULL, status text NOT NULL, placed timestamptz NOT NULL DEFAULT now());
INSERT INTO customers (id, name, city) SELECT g, 'customer ' || g, (ARRAY['Lisbon','Oslo','Lima','Osaka'])[1 + g % 4] FROM generate_series(1, 1000) g;
INSERT INTO orders (id, customer_id, amount, status) SELECT g, 1 + g % 1000, (g % 500) + 0.99, 'new' FROM generate_series(1, 5000) g;
CREATE PUBLICATION pgfeldera FOR TABLE customers, orders;`

const demoFeldera = `
CREATE TABLE customers (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR NOT NULL, city VARCHAR, created TIMESTAMP NOT NULL);
CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, customer_id BIGINT NOT NULL, amount DECIMAL(10,2) NOT NULL, status VARCHAR NOT NULL, placed TIMESTAMP NOT NULL);`

// runDemo starts a throwaway Postgres and (unless FELDERA_URL is set) the
// built-in Feldera double, runs the connector with a live workload, and
// shows progress and a final side-by-side count.
func runDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pgfeldera demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", 20*time.Second, "how long to drive the live workload (0: until Ctrl-C)")
	keep := fs.Bool("keep", false, "keep Postgres and Feldera running after the workload, until Ctrl-C, and print how to reach them")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK
		}
		return exitConfig
	}
	say := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }
	say("pgfeldera demo: starting a throwaway PostgreSQL (initdb into a temp dir)…")
	cluster, err := pgcluster.Start(pgcluster.Options{})
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera demo:", err)
		return exitFatal
	}
	defer func() {
		cluster.Stop()
		say("pgfeldera demo: stopped PostgreSQL and removed %s", cluster.Dir)
	}()
	if err := cluster.Exec(ctx, "postgres", "CREATE DATABASE demo"); err != nil {
		fmt.Fprintln(stderr, "pgfeldera demo:", err)
		return exitFatal
	}
	dsn := cluster.DSN("demo")
	if err := cluster.Exec(ctx, "demo", demoPG); err != nil {
		fmt.Fprintln(stderr, "pgfeldera demo: create sample tables:", err)
		return exitFatal
	}
	say("  postgres: %s (tables customers: 1000 rows, orders: 5000 rows)", dsn)

	url, pipeline, apiKey := getenv("FELDERA_URL"), getenv("FELDERA_PIPELINE"), getenv("FELDERA_API_KEY")
	if url == "" {
		srv, err := felderatest.NewServer(felderatest.Config{Pipeline: "demo", Tables: felderatest.MustParseDDL(demoFeldera)})
		if err != nil {
			fmt.Fprintln(stderr, "pgfeldera demo:", err)
			return exitFatal
		}
		defer srv.Close()
		url, pipeline = srv.URL, "demo"
		say("  feldera:  built-in double at %s (pipeline %q)", url, pipeline)
	} else {
		if pipeline == "" {
			pipeline = "demo"
		}
		say("  feldera:  %s (pipeline %q; it needs tables customers and orders, see `pgfeldera demo --help`)", redactURL(url), pipeline)
	}
	client, err := feldera.New(feldera.Config{URL: url, Pipeline: pipeline, APIKey: apiKey})
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera demo:", err)
		return exitConfig
	}
	tables, _ := catalog.ParseTables("customers,orders")
	stateDir, err := os.MkdirTemp("", "pgfeldera-demo-")
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera demo:", err)
		return exitFatal
	}
	defer os.RemoveAll(stateDir)
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ccfg := connector.Config{
		DSN: dsn, Publication: "pgfeldera", Slot: "pgfeldera_demo", Tables: tables,
		RequirePrimaryKey: true, StateFile: stateDir + "/state.json", BatchMaxRows: 2000,
		BatchLinger: 50 * time.Millisecond, SnapshotMode: connector.SnapshotInitial, Logger: logger,
	}
	conn, err := connector.New(ccfg, client)
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera demo:", err)
		return exitFatal
	}
	runCtx, stopConnector := context.WithCancel(context.Background())
	defer stopConnector()
	done := make(chan error, 1)
	go func() { done <- conn.Run(runCtx) }()

	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera demo:", err)
		return exitFatal
	}
	defer db.Close(context.Background())

	say("pgfeldera demo: snapshot, then live changes (inserts, updates, a delete, a TRUNCATE). Ctrl-C stops.")
	say("  %-8s %12s %12s %8s %14s %12s", "time", "copied", "streamed", "batches", "acked LSN", "lag bytes")
	start := time.Now()
	var end <-chan time.Time
	if *duration > 0 {
		end = time.After(*duration)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	work := time.NewTicker(100 * time.Millisecond)
	defer work.Stop()
	nextOrder, step := int64(100000), 0
	truncated := false
	show := func() {
		st := conn.Stats()
		var head pglogrepl.LSN
		var s string
		if db.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s) == nil {
			head, _ = pglogrepl.ParseLSN(s)
		}
		acked := pglogrepl.LSN(st.Acked.Load())
		lag := int64(0)
		if head > acked && acked > 0 {
			lag = int64(head - acked)
		}
		say("  %-8s %12d %12d %8d %14s %12d", time.Since(start).Round(time.Second), st.SnapshotRows.Load(), st.StreamRows.Load(), st.Batches.Load(), acked, lag)
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-end:
			break loop
		case err := <-done:
			fmt.Fprintf(stderr, "pgfeldera demo: connector stopped: %v\n%s", err, logs.String())
			return exitFatal
		case <-tick.C:
			show()
		case <-work.C:
			if conn.Stats().Acked.Load() == 0 {
				continue // wait for the snapshot
			}
			step++
			q := []string{
				fmt.Sprintf("INSERT INTO orders (id, customer_id, amount, status) VALUES (%d, %d, %d.50, 'new')", nextOrder, 1+rand.IntN(1000), rand.IntN(900)),
				fmt.Sprintf("UPDATE orders SET status = 'shipped' WHERE id = %d", 1+rand.IntN(5000)),
				fmt.Sprintf("UPDATE customers SET city = 'Porto' WHERE id = %d", 1+rand.IntN(1000)),
			}
			nextOrder++
			if step%10 == 0 {
				q = append(q, fmt.Sprintf("DELETE FROM orders WHERE id = %d", 1+rand.IntN(5000)))
			}
			if step == 80 && !truncated {
				truncated = true
				q = append(q, "TRUNCATE orders")
			}
			for _, s := range q {
				if _, err := db.Exec(ctx, s); err != nil && ctx.Err() == nil {
					fmt.Fprintln(stderr, "pgfeldera demo: workload:", err)
				}
			}
		}
	}
	// Let the connector catch up, then compare.
	var target string
	db.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&target)
	want, _ := pglogrepl.ParseLSN(target)
	deadline := time.Now().Add(30 * time.Second)
	for pglogrepl.LSN(conn.Stats().Acked.Load()) < want && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	show()
	ok := compare(context.Background(), ccfg, client, stdout)
	if *keep {
		say("\npgfeldera demo: --keep: still running. Postgres: %s  Feldera: %s/v0/pipelines/%s  (Ctrl-C to stop)", dsn, url, pipeline)
		<-ctx.Done()
	}
	stopConnector()
	if err := <-done; err != nil {
		fmt.Fprintln(stderr, "pgfeldera demo: connector:", err)
	}
	if !ok {
		return exitFatal
	}
	return exitOK
}

// compare runs pgfeldera verify's comparison: counts, and a hash of the
// rows on both sides.
func compare(ctx context.Context, cfg connector.Config, client *feldera.Client, w io.Writer) bool {
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	verdicts, err := connector.Verify(ctx, cfg, client, 3)
	if err != nil {
		fmt.Fprintln(w, "pgfeldera demo: verify:", err)
		return false
	}
	fmt.Fprintf(w, "\n  %-10s %10s %10s  rows hash (pgfeldera verify)\n", "table", "postgres", "feldera")
	ok := true
	for _, v := range verdicts {
		mark := "✓"
		if !v.Match {
			mark, ok = "✗ "+v.Error, false
		}
		fmt.Fprintf(w, "  %-10s %10d %10d  %s  %s\n", v.Dest, v.PostgresRows, v.FelderaRows, v.PostgresHash[:12], mark)
		for _, d := range v.Differences {
			fmt.Fprintf(w, "      %s: %s %s\n", d.Key, d.Kind, strings.Join(d.Columns, ","))
		}
	}
	return ok
}

// lockedBuffer keeps the connector's log for when the demo fails; it is
// written from the connector's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// redactURL hides a password in FELDERA_URL.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

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
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/verify"
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
CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, customer_id BIGINT NOT NULL, amount DECIMAL(10,2) NOT NULL, status VARCHAR NOT NULL, placed TIMESTAMP NOT NULL);
` + setup.ProgressDDL // declared, the default (FELDERA_PROGRESS_TABLE=auto) makes replays exact

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
	d := &demo{stdout: stdout, stderr: stderr}
	defer d.close()
	if code := d.start(ctx, getenv); code != exitOK {
		return code
	}
	runCtx, stopConnector := context.WithCancel(context.Background())
	defer stopConnector()
	done := make(chan error, 1)
	go func() { done <- d.conn.Run(runCtx) }()
	if err := d.drive(ctx, *duration, done); err != nil {
		fmt.Fprintf(stderr, "pgfeldera demo: connector stopped: %v\n%s", err, d.logs.String())
		return exitFatal
	}
	d.catchUp()
	ok := compare(context.Background(), d.ccfg, d.client, stdout)
	if *keep {
		d.say("\npgfeldera demo: --keep: still running. Postgres: %s  Feldera: %s/v0/pipelines/%s  (Ctrl-C to stop)", d.dsn, d.url, d.pipeline)
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

// demo is one run of the demo: what it started, and what close stops.
type demo struct {
	stdout, stderr     io.Writer
	cluster            *pgcluster.Cluster
	srv                *felderatest.Server
	stateDir           string
	dsn, url, pipeline string
	client             *feldera.Client
	ccfg               connector.Config
	conn               *connector.Connector
	db                 *pgx.Conn
	logs               *lockedBuffer
	began              time.Time
}

func (d *demo) say(format string, a ...any) { fmt.Fprintf(d.stdout, format+"\n", a...) }

// fail reports err and returns code.
func (d *demo) fail(code int, what string, err error) int {
	fmt.Fprintln(d.stderr, "pgfeldera demo:"+what, err)
	return code
}

// start starts Postgres with the sample tables, Feldera (the double unless
// FELDERA_URL is set) and the connector's configuration.
func (d *demo) start(ctx context.Context, getenv func(string) string) int {
	d.say("pgfeldera demo: starting a throwaway PostgreSQL (initdb into a temp dir)…")
	var err error
	if d.cluster, err = pgcluster.Start(pgcluster.Options{}); err != nil {
		return d.fail(exitFatal, "", err)
	}
	if err := d.cluster.Exec(ctx, "postgres", "CREATE DATABASE demo"); err != nil {
		return d.fail(exitFatal, "", err)
	}
	d.dsn = d.cluster.DSN("demo")
	if err := d.cluster.Exec(ctx, "demo", demoPG); err != nil {
		return d.fail(exitFatal, " create sample tables:", err)
	}
	d.say("  postgres: %s (tables customers: 1000 rows, orders: 5000 rows)", d.dsn)
	d.url, d.pipeline = getenv("FELDERA_URL"), getenv("FELDERA_PIPELINE")
	if d.url == "" {
		if d.srv, err = felderatest.NewServer(felderatest.Config{Pipeline: "demo", Tables: felderatest.MustParseDDL(demoFeldera)}); err != nil {
			return d.fail(exitFatal, "", err)
		}
		d.url, d.pipeline = d.srv.URL, "demo"
		d.say("  feldera:  built-in double at %s (pipeline %q)", d.url, d.pipeline)
	} else {
		if d.pipeline == "" {
			d.pipeline = "demo"
		}
		d.say("  feldera:  %s (pipeline %q; it needs tables customers and orders, see `pgfeldera demo --help`)", feldera.RedactURL(d.url), d.pipeline)
	}
	if d.client, err = feldera.New(feldera.Config{URL: d.url, Pipeline: d.pipeline, APIKey: getenv("FELDERA_API_KEY")}); err != nil {
		return d.fail(exitConfig, "", err)
	}
	if d.stateDir, err = os.MkdirTemp("", "pgfeldera-demo-"); err != nil {
		return d.fail(exitFatal, "", err)
	}
	tables, _ := catalog.ParseTables("customers,orders")
	d.logs = &lockedBuffer{}
	d.ccfg = connector.Config{
		DSN: d.dsn, Publication: "pgfeldera", Slot: "pgfeldera_demo", Tables: tables,
		RequirePrimaryKey: true, StateFile: d.stateDir + "/state.json", BatchMaxRows: 2000,
		BatchLinger: 50 * time.Millisecond, SnapshotMode: connector.SnapshotInitial,
		Logger: slog.New(slog.NewTextHandler(d.logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if d.conn, err = connector.New(d.ccfg, d.client); err != nil {
		return d.fail(exitFatal, "", err)
	}
	if d.db, err = pgx.Connect(ctx, d.dsn); err != nil {
		return d.fail(exitFatal, "", err)
	}
	return exitOK
}

// close stops what start started.
func (d *demo) close() {
	if d.db != nil {
		d.db.Close(context.Background())
	}
	if d.stateDir != "" {
		os.RemoveAll(d.stateDir)
	}
	if d.srv != nil {
		d.srv.Close()
	}
	if d.cluster != nil {
		d.cluster.Stop()
		d.say("pgfeldera demo: stopped PostgreSQL and removed %s", d.cluster.Dir)
	}
}

// drive runs the workload and shows progress every second, for duration
// (0: until ctx ends); it returns the connector's error if it stopped.
func (d *demo) drive(ctx context.Context, duration time.Duration, done <-chan error) error {
	d.say("pgfeldera demo: snapshot, then live changes (inserts, updates, a delete, a TRUNCATE). Ctrl-C stops.")
	d.say("  %-8s %12s %12s %8s %14s %12s", "time", "copied", "streamed", "batches", "acked LSN", "lag bytes")
	d.began = time.Now()
	var end <-chan time.Time
	if duration > 0 {
		end = time.After(duration)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	work := time.NewTicker(100 * time.Millisecond)
	defer work.Stop()
	step := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-end:
			return nil
		case err := <-done:
			return err
		case <-tick.C:
			d.show(ctx)
		case <-work.C:
			if d.conn.Stats().Acked.Load() == 0 {
				continue // wait for the snapshot
			}
			step++
			d.changes(ctx, step)
		}
	}
}

// changes is the workload's step: an order, two updates, every tenth step
// a delete, and at step 80 a TRUNCATE.
func (d *demo) changes(ctx context.Context, step int) {
	q := []string{
		fmt.Sprintf("INSERT INTO orders (id, customer_id, amount, status) VALUES (%d, %d, %d.50, 'new')", 100000+step, 1+rand.IntN(1000), rand.IntN(900)),
		fmt.Sprintf("UPDATE orders SET status = 'shipped' WHERE id = %d", 1+rand.IntN(5000)),
		fmt.Sprintf("UPDATE customers SET city = 'Porto' WHERE id = %d", 1+rand.IntN(1000)),
	}
	if step%10 == 0 {
		q = append(q, fmt.Sprintf("DELETE FROM orders WHERE id = %d", 1+rand.IntN(5000)))
	}
	if step == 80 {
		q = append(q, "TRUNCATE orders")
	}
	for _, s := range q {
		if _, err := d.db.Exec(ctx, s); err != nil && ctx.Err() == nil {
			fmt.Fprintln(d.stderr, "pgfeldera demo: workload:", err)
		}
	}
}

// show prints one progress line.
func (d *demo) show(ctx context.Context) {
	st := d.conn.Stats()
	var head pglogrepl.LSN
	var s string
	if d.db.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s) == nil {
		head, _ = pglogrepl.ParseLSN(s)
	}
	acked := pglogrepl.LSN(st.Acked.Load())
	lag := int64(0)
	if head > acked && acked > 0 {
		lag = int64(head - acked)
	}
	d.say("  %-8s %12d %12d %8d %14s %12d", time.Since(d.began).Round(time.Second), st.SnapshotRows.Load(), st.StreamRows.Load(), st.Batches.Load(), acked, lag)
}

// catchUp lets the connector acknowledge the workload (30 s at most) and
// shows the last progress line.
func (d *demo) catchUp() {
	var target string
	d.db.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&target)
	want, _ := pglogrepl.ParseLSN(target)
	deadline := time.Now().Add(30 * time.Second)
	for pglogrepl.LSN(d.conn.Stats().Acked.Load()) < want && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	d.show(context.Background())
}

// compare runs pgfeldera verify's comparison: counts, and a hash of the
// rows on both sides.
func compare(ctx context.Context, cfg connector.Config, client *feldera.Client, w io.Writer) bool {
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	sc, _, err := connector.Inspect(cfg)
	if err != nil {
		fmt.Fprintln(w, "pgfeldera demo: verify:", err)
		return false
	}
	verdicts, err := verify.Tables(ctx, sc, client, 3)
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

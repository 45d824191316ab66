// Command pgfeldera-bench measures pgfeldera against PostgreSQL's own
// ceilings, in one run on a private cluster, alternating each reference and
// pgfeldera round by round, and prints medians and ratios:
//
//	a  bulk catch-up: N rows in 100 transactions, pg_recvlogical vs pgfeldera
//	b  single-row transactions, pg_recvlogical vs pgfeldera
//	c  snapshot of N rows, COPY TO STDOUT (psql, to /dev/null) vs pgfeldera
//	d  live: pgbench at a fixed rate, commit-to-Feldera latency p50/p99
//	e  peak RSS of pgfeldera for a 10k-row and an N-row transaction
//	f  bulk catch-up while the double completes each request 0, 50, 250
//	   or 1000 ms after it arrives: throughput and its ratio to 0 ms
//	g  peak RSS for one transaction of 1,000 rows × 512 KB
//	h  (with a) a raw reader of the same stream that only counts inserts
//	i  p99 commit → confirmed_flush_lsn at a fixed rate, 50 ms completion
//
// pgfeldera runs as its own process (the binary given by -pgfeldera) into a
// Feldera double in this process that only counts rows and completes
// tokens at once. Usage: make bench (or see -help).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// Result is one workload's figures.
type Result struct {
	Workload  string    `json:"workload"`
	What      string    `json:"what"`
	Unit      string    `json:"unit"`
	Reference string    `json:"reference,omitempty"`
	Ref       []float64 `json:"reference_runs,omitempty"`
	PGF       []float64 `json:"pgfeldera_runs"`
	RefMedian float64   `json:"reference_median,omitempty"`
	PGFMedian float64   `json:"pgfeldera_median"`
	Ratio     float64   `json:"ratio,omitempty"`
	Target    string    `json:"target"`
	Pass      bool      `json:"pass"`
	Extra     any       `json:"extra,omitempty"`
}

// Report is the JSON the command writes.
type Report struct {
	Started    time.Time         `json:"started"`
	Postgres   int               `json:"postgres_major"`
	Rounds     int               `json:"rounds"`
	Rows       int               `json:"rows"`
	Txns       int               `json:"single_row_txns"`
	Settings   map[string]string `json:"pgfeldera_settings,omitempty"`
	Results    []Result          `json:"results"`
	DurationS  float64           `json:"duration_seconds"`
	GoMaxProcs int               `json:"cpus"`
}

func main() { os.Exit(run()) }

func run() int {
	bin := flag.String("pgfeldera", "bin/pgfeldera", "pgfeldera binary to measure")
	rounds := flag.Int("rounds", 3, "alternations of reference and pgfeldera per workload")
	rows := flag.Int("rows", 1_000_000, "rows for the bulk, snapshot and large-transaction workloads")
	txns := flag.Int("txns", 100_000, "single-row transactions")
	rate := flag.Int("live-rate", 10_000, "live workload: rows per second")
	liveFor := flag.Duration("live-duration", 20*time.Second, "live workload: how long pgbench runs")
	only := flag.String("only", "abcdefghijk", "workloads to run (h runs with a)")
	out := flag.String("out", "bench-result.json", "JSON result file")
	flag.Parse()

	abs, err := filepath.Abs(*bin)
	if err == nil {
		_, err = os.Stat(abs)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgfeldera-bench: -pgfeldera %s: %v (make build)\n", *bin, err)
		return 2
	}
	b, err := newBench(abs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgfeldera-bench:", err)
		return 1
	}
	defer b.close()
	rep := Report{Started: time.Now(), Postgres: b.cluster.Version, Rounds: *rounds, Rows: *rows, Txns: *txns,
		Settings: passedSettings(), GoMaxProcs: cpus()}
	fmt.Printf("pgfeldera-bench: PostgreSQL %d in %s, %d CPUs, %d rounds\n", b.cluster.Version, b.cluster.Dir, rep.GoMaxProcs, *rounds)
	steps := []struct {
		id string
		fn func() (Result, error)
	}{
		{"a", func() (Result, error) { return b.bulk(*rounds, *rows) }},
		{"b", func() (Result, error) { return b.singleRow(*rounds, *txns) }},
		{"c", func() (Result, error) { return b.snapshot(*rounds, *rows) }},
		{"k", func() (Result, error) { return b.incremental(*rounds, *rows) }},
		{"d", func() (Result, error) { return b.live(*rate, *liveFor) }},
		{"e", func() (Result, error) { return b.peakRSS(*rounds, *rows) }},
		{"f", func() (Result, error) { return b.slowCompletion(*rounds, *rows) }},
		{"g", func() (Result, error) { return b.wideRows(*rounds) }},
		{"i", func() (Result, error) { return b.ackLatency(*rate, *liveFor) }},
		{"j", func() (Result, error) { return b.transactionsCost(*rounds, *txns, *rate, *liveFor) }},
	}
	failed := false
	b.raw = strings.Contains(*only, "h")
	for _, s := range steps {
		if !strings.Contains(*only, s.id) {
			continue
		}
		r, err := s.fn()
		if err != nil {
			fmt.Fprintf(os.Stderr, "pgfeldera-bench: workload %s: %v\n", s.id, err)
			failed = true
			continue
		}
		rep.Results = append(rep.Results, r)
		fmt.Printf("  %s done: %s\n", s.id, summary(r))
		if s.id == "a" && b.rawResult != nil {
			rep.Results = append(rep.Results, *b.rawResult)
			fmt.Printf("  h done: %s\n", summary(*b.rawResult))
		}
	}
	rep.DurationS = time.Since(rep.Started).Seconds()
	printTable(os.Stdout, rep.Results)
	if data, err := json.MarshalIndent(rep, "", "  "); err == nil {
		if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "pgfeldera-bench:", err)
			failed = true
		} else {
			fmt.Printf("wrote %s (%.0f s)\n", *out, rep.DurationS)
		}
	}
	if failed {
		return 1
	}
	return 0
}

// passedSettings lists the pgfeldera variables set in the environment: the
// runs inherit them (e.g. BATCH_MAX_ROWS), so the report must say so.
func passedSettings() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"BATCH_MAX_ROWS", "BATCH_MAX_BYTES", "BATCH_MAX_IN_FLIGHT", "BATCH_LINGER_MS", "FELDERA_ACK_MODE", "SNAPSHOT_CHUNK_ROWS"} {
		if v := os.Getenv(k); v != "" {
			m[k] = v
		}
	}
	return m
}

// logLevel is pgfeldera's LOG_LEVEL in the runs: warn, unless
// BENCH_LOG_LEVEL says otherwise (a failure prints the log's tail).
func logLevel() string {
	if v := os.Getenv("BENCH_LOG_LEVEL"); v != "" {
		return v
	}
	return "warn"
}

func cpus() int {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return strings.Count(string(data), "\nprocessor") + 1
}

type bench struct {
	cluster *pgcluster.Cluster
	dsn     string
	conn    *pgx.Conn
	bin     string
	dir     string
	seq     int

	raw       bool          // run the raw reader beside a (workload h)
	rawResult *Result       // its figures
	delay     time.Duration // the next double's completion delay
}

const schema = `
CREATE TABLE t (id bigint PRIMARY KEY, name text, amount numeric(12,2), ts timestamptz, payload jsonb);
CREATE PUBLICATION pub FOR TABLE t;
CREATE TABLE live (id bigserial PRIMARY KEY, ts timestamptz NOT NULL DEFAULT clock_timestamp(), payload text);
CREATE PUBLICATION pub_live FOR TABLE live;
CREATE TABLE t2 (id bigint PRIMARY KEY, ref bigint, qty int);
CREATE PUBLICATION pub_two FOR TABLE t, t2;
CREATE PUBLICATION pub_live_two FOR TABLE live, t2;
CREATE TABLE wide (id bigint PRIMARY KEY, payload text);
ALTER TABLE wide ALTER COLUMN payload SET STORAGE EXTERNAL;
CREATE PUBLICATION pub_wide FOR TABLE wide;`

const felderaSchema = `
CREATE TABLE t (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, amount DECIMAL(12,2), ts TIMESTAMP_TZ, payload VARIANT);
CREATE TABLE live (id BIGINT NOT NULL PRIMARY KEY, ts TIMESTAMP_TZ NOT NULL, payload VARCHAR);
CREATE TABLE wide (id BIGINT NOT NULL PRIMARY KEY, payload VARCHAR);
CREATE TABLE t2 (id BIGINT NOT NULL PRIMARY KEY, ref BIGINT, qty INT);`

// rowsSQL inserts rows [from, to] into t.
func rowsSQL(from, to int) string {
	return fmt.Sprintf(`INSERT INTO t SELECT g, 'name-' || g, g * 0.01, '2024-01-01'::timestamptz + g * interval '1 second',
		jsonb_build_object('k', g, 'v', 'payload') FROM generate_series(%d, %d) g`, from, to)
}

func newBench(bin string) (*bench, error) {
	c, err := pgcluster.Start(pgcluster.Options{Settings: map[string]string{
		"synchronous_commit": "off",
		"max_wal_size":       "8GB",
		"checkpoint_timeout": "30min",
		"shared_buffers":     "256MB",
		"wal_sender_timeout": "60s",
	}})
	if err != nil {
		return nil, err
	}
	b := &bench{cluster: c, dsn: c.DSN("postgres"), bin: bin}
	if b.dir, err = os.MkdirTemp("", "pgfeldera-bench-"); err != nil {
		c.Stop()
		return nil, err
	}
	if b.conn, err = pgx.Connect(context.Background(), b.dsn); err != nil {
		b.close()
		return nil, err
	}
	if err := b.exec(schema); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *bench) close() {
	if b.conn != nil {
		b.conn.Close(context.Background())
	}
	b.cluster.Stop()
	os.RemoveAll(b.cluster.Dir)
	if os.Getenv("BENCH_KEEP") == "" {
		os.RemoveAll(b.dir)
	}
}

// exec runs SQL with the simple protocol, so DO blocks may COMMIT.
func (b *bench) exec(sql string) error {
	_, err := b.conn.PgConn().Exec(context.Background(), sql).ReadAll()
	return err
}

// lsn is the WAL insert position: with the cluster's
// synchronous_commit=off, the write position (pg_current_wal_lsn) can lag
// behind the last commit, and a connector that acknowledged it would look
// finished before the last transaction was even decoded.
func (b *bench) lsn() (pglogrepl.LSN, error) {
	var s string
	if err := b.conn.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(s)
}

func (b *bench) createSlot(name string) error {
	return b.exec(fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", name))
}

func (b *bench) dropSlot(name string) error {
	var err error
	for i := 0; i < 100; i++ { // the walsender may still be exiting
		if err = b.exec(fmt.Sprintf("SELECT pg_drop_replication_slot('%s')", name)); err == nil || !strings.Contains(err.Error(), "is active") {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

func (b *bench) confirmed(slot string) (pglogrepl.LSN, error) {
	var s *string
	err := b.conn.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s)
	if err != nil || s == nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(*s)
}

// recvlogical drains slot up to end with pg_recvlogical into /dev/null.
func (b *bench) recvlogical(slot, pub string, end pglogrepl.LSN) (time.Duration, float64, error) {
	cmd := exec.Command(filepath.Join(b.cluster.BinDir, "pg_recvlogical"), "-d", b.dsn, "--slot", slot, "--start",
		"-o", "proto_version=1", "-o", "publication_names="+pub, "--endpos", end.String(), "--no-loop", "-f", "/dev/null")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("pg_recvlogical: %w: %s", err, out)
	}
	return time.Since(start), cpuSeconds(cmd.ProcessState), nil
}

// cpuSeconds is a finished process's user + system CPU time.
func cpuSeconds(ps *os.ProcessState) float64 {
	return (ps.UserTime() + ps.SystemTime()).Seconds()
}

// pgf is one pgfeldera process and the double it writes to.
type pgf struct {
	cmd   *exec.Cmd
	fel   *felderatest.Server
	log   string
	start time.Time
	done  chan struct{}
}

func (b *bench) startPGF(slot, tables, pub, snapshotMode string, env map[string]string, onIngress func(string, []byte, time.Time)) (*pgf, error) {
	fel, err := felderatest.NewServer(felderatest.Config{Pipeline: "bench", Tables: felderatest.MustParseDDL(felderaSchema),
		CountOnly: true, OnIngress: onIngress})
	if err != nil {
		return nil, err
	}
	fel.SetCompletionDelay(b.delay)
	b.seq++
	logPath := filepath.Join(b.dir, fmt.Sprintf("pgfeldera-%d.log", b.seq))
	logf, err := os.Create(logPath)
	if err != nil {
		fel.Close()
		return nil, err
	}
	cmd := exec.Command(b.bin, "run")
	cmd.Env = append(os.Environ(),
		"PG_DSN="+b.dsn, "PG_PUBLICATION="+pub, "PG_SLOT="+slot, "TABLES="+tables,
		"FELDERA_URL="+fel.URL, "FELDERA_PIPELINE=bench", "SNAPSHOT_MODE="+snapshotMode,
		"STATE_FILE="+filepath.Join(b.dir, fmt.Sprintf("state-%d.json", b.seq)), "HTTP_ADDR=", "LOG_LEVEL="+logLevel())
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &pgf{cmd: cmd, fel: fel, log: logPath, start: time.Now(), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		logf.Close()
		fel.Close()
		return nil, err
	}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// stop ends the process gracefully and returns its peak RSS in bytes
// and the CPU seconds it used.
func (p *pgf) stop() (rss int64, cpu float64, err error) {
	defer p.fel.Close()
	select {
	case <-p.done:
		return 0, 0, p.failure("exited early")
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return 0, 0, p.failure("did not stop within 30 s of SIGTERM")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return 0, 0, p.failure(fmt.Sprintf("exit %d", code))
	}
	if ru, _ := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ru != nil {
		rss = ru.Maxrss * 1024
	}
	return rss, cpuSeconds(p.cmd.ProcessState), nil
}

func (p *pgf) failure(what string) error {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return fmt.Errorf("pgfeldera %s; log tail:\n%s", what, strings.Join(lines, "\n"))
}

// waitFor polls cond every 2 ms until it holds; the process must stay up.
func (p *pgf) waitFor(what string, timeout time.Duration, cond func() (bool, error)) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return 0, err
		}
		if ok {
			return time.Since(p.start), nil
		}
		select {
		case <-p.done:
			return 0, p.failure("exited while waiting for " + what)
		default:
		}
		if time.Now().After(deadline) {
			return 0, p.failure("timed out waiting for " + what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// drainPGF streams slot up to end and returns the time until the slot's
// confirmed_flush_lsn reached it, having checked every row arrived.
func (b *bench) drainPGF(slot string, end pglogrepl.LSN, rows int) (time.Duration, float64, error) {
	p, err := b.startPGF(slot, "t", "pub", "never", nil, nil)
	if err != nil {
		return 0, 0, err
	}
	d, err := p.waitFor("confirmed_flush_lsn "+end.String(), 10*time.Minute, func() (bool, error) {
		c, err := b.confirmed(slot)
		return c >= end, err
	})
	got := p.fel.CountedRows("t")
	_, cpu, serr := p.stop()
	if err == nil {
		err = serr
	}
	if err == nil && got < rows {
		err = p.failure(fmt.Sprintf("let the slot confirm %s but the double counted %d rows, want %d", end, got, rows))
	}
	return d, cpu, err
}

// streamRounds runs load, then drains the same WAL with pg_recvlogical and
// pgfeldera (order alternating per round) and returns rows/s for each.
func (b *bench) streamRounds(rounds, rows int, withRaw bool, load func(round int) string) (ref, pgfRates []float64, cpu map[string][]float64, err error) {
	cpu = map[string][]float64{}
	for r := 0; r < rounds; r++ {
		if err := b.exec("TRUNCATE t"); err != nil {
			return nil, nil, nil, err
		}
		refSlot, pgfSlot, rawSlot := fmt.Sprintf("ref_%d", b.seq+r), fmt.Sprintf("pgf_%d", b.seq+r), fmt.Sprintf("raw_%d", b.seq+r)
		if err := b.createSlot(refSlot); err != nil {
			return nil, nil, nil, err
		}
		if withRaw {
			if err := b.createSlot(rawSlot); err != nil {
				return nil, nil, nil, err
			}
		}
		if err := b.createSlot(pgfSlot); err != nil {
			return nil, nil, nil, err
		}
		if err := b.exec(load(r)); err != nil {
			return nil, nil, nil, err
		}
		end, err := b.lsn()
		if err != nil {
			return nil, nil, nil, err
		}
		var refD, pgfD time.Duration
		var refCPU, pgfCPU float64
		runRef := func() error { refD, refCPU, err = b.recvlogical(refSlot, "pub", end); return err }
		runPGF := func() error { pgfD, pgfCPU, err = b.drainPGF(pgfSlot, end, rows); return err }
		if err := alternate(r, runRef, runPGF); err != nil {
			return nil, nil, nil, err
		}
		if withRaw {
			// Last, on its own slot over the same WAL: the cache is as warm
			// as for the second of the two above.
			d, err := b.rawDrain(rawSlot, "pub", rows)
			if err != nil {
				return nil, nil, nil, err
			}
			cpu["raw"] = append(cpu["raw"], float64(rows)/d.Seconds())
			fmt.Printf("    round %d: raw reader %.0f rows/s\n", r+1, float64(rows)/d.Seconds())
			b.dropSlot(rawSlot)
		}
		ref = append(ref, float64(rows)/refD.Seconds())
		pgfRates = append(pgfRates, float64(rows)/pgfD.Seconds())
		cpu["pg_recvlogical"] = append(cpu["pg_recvlogical"], refCPU)
		cpu["pgfeldera"] = append(cpu["pgfeldera"], pgfCPU)
		fmt.Printf("    round %d: pg_recvlogical %.0f rows/s (%.2f CPU s), pgfeldera %.0f rows/s (%.2f CPU s)\n", r+1, ref[r], refCPU, pgfRates[r], pgfCPU)
		b.dropSlot(refSlot)
		b.dropSlot(pgfSlot)
	}
	return ref, pgfRates, cpu, nil
}

// alternate runs the reference first in even rounds (0, 2, …) and
// pgfeldera first in odd ones, so neither always gets the warmer cache.
func alternate(round int, ref, pgf func() error) error {
	if round%2 == 1 {
		ref, pgf = pgf, ref
	}
	if err := ref(); err != nil {
		return err
	}
	return pgf()
}

func (b *bench) bulk(rounds, rows int) (Result, error) {
	fmt.Printf("a: bulk catch-up, %d rows in 100 transactions\n", rows)
	ref, pgf, cpu, err := b.streamRounds(rounds, rows, b.raw, func(int) string { return bulkSQL(rows) })
	if err != nil {
		return Result{}, err
	}
	res := ratioResult("a", fmt.Sprintf("bulk catch-up: %d rows in 100 transactions", rows), "rows/s", "pg_recvlogical", ref, pgf, 0.8)
	if raw := cpu["raw"]; len(raw) > 0 {
		h := ratioResult("h", fmt.Sprintf("bulk catch-up as in a, against a raw reader of the same stream that only counts inserts (the walsender's ceiling); pg_recvlogical %.0f rows/s", res.RefMedian), "rows/s", "raw reader", raw, pgf, 0.9)
		b.rawResult = &h
		delete(cpu, "raw")
	}
	res.Extra = cpuExtra(cpu, rows)
	return res, nil
}

// bulkSQL inserts rows into t in 100 transactions.
func bulkSQL(rows int) string {
	per := rows / 100
	return fmt.Sprintf(`DO $$ BEGIN FOR i IN 0..99 LOOP %s; COMMIT; END LOOP; END $$`,
		strings.ReplaceAll(rowsSQL(0, 0), "generate_series(0, 0)", fmt.Sprintf("generate_series(i * %d + 1, (i + 1) * %d)", per, per)))
}

func (b *bench) singleRow(rounds, txns int) (Result, error) {
	fmt.Printf("b: %d single-row transactions\n", txns)
	ref, pgf, cpu, err := b.streamRounds(rounds, txns, false, func(int) string {
		return fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP %s; COMMIT; END LOOP; END $$`, txns,
			strings.ReplaceAll(rowsSQL(0, 0), "generate_series(0, 0)", "generate_series(i, i)"))
	})
	if err != nil {
		return Result{}, err
	}
	res := ratioResult("b", fmt.Sprintf("%d single-row transactions", txns), "rows/s", "pg_recvlogical", ref, pgf, 0.7)
	res.Extra = cpuExtra(cpu, txns)
	return res, nil
}

// incremental is SNAPSHOT_MODE=incremental against initial, side by
// side, each from process start to the last row in Feldera, and both
// against COPY to /dev/null (issue 17: target ≥ 0.8 × initial).
func (b *bench) incremental(rounds, rows int) (Result, error) {
	fmt.Printf("k: incremental snapshot of %d rows against initial\n", rows)
	for _, q := range []string{"TRUNCATE t", rowsSQL(1, rows), "VACUUM ANALYZE t"} {
		if err := b.exec(q); err != nil {
			return Result{}, err
		}
	}
	copyStart := time.Now()
	cmd := exec.Command(filepath.Join(b.cluster.BinDir, "psql"), "-X", "-q", "-d", b.dsn, "-c", "COPY t TO STDOUT")
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return Result{}, err
	}
	cmd.Stdout = devnull
	err = cmd.Run()
	devnull.Close()
	if err != nil {
		return Result{}, fmt.Errorf("psql COPY: %w", err)
	}
	copyRate := float64(rows) / time.Since(copyStart).Seconds()
	// pgfeldera's CPU seconds per run, by mode and lanes: the split the
	// ratio depends on, on a machine whose CPUs the runs saturate.
	cpu := map[string][]float64{}
	load := func(mode string, r int, lanes int) (float64, error) {
		slot := fmt.Sprintf("inc_%s_%d_%d", mode, lanes, r)
		p, err := b.startPGF(slot, "t", "pub", mode, map[string]string{"SNAPSHOT_PARALLELISM": strconv.Itoa(lanes)}, nil)
		if err != nil {
			return 0, err
		}
		d, err := p.waitFor("the "+mode+" snapshot", 10*time.Minute, func() (bool, error) { return p.fel.CountedRows("t") >= rows, nil })
		_, sec, serr := p.stop()
		if err == nil {
			err = serr
		}
		key := mode
		if lanes > 1 {
			key += "_" + strconv.Itoa(lanes)
		}
		cpu[key] = append(cpu[key], sec)
		b.dropSlot(slot)
		return float64(rows) / d.Seconds(), err
	}
	var ref, inc, inc2 []float64
	for r := 0; r < rounds; r++ {
		runRef := func() error {
			v, err := load("initial", r, 1)
			ref = append(ref, v)
			return err
		}
		runInc := func() error {
			v, err := load("incremental", r, 1)
			inc = append(inc, v)
			if err != nil {
				return err
			}
			v, err = load("incremental", r, 2)
			inc2 = append(inc2, v)
			return err
		}
		if err := alternate(r, runRef, runInc); err != nil {
			return Result{}, err
		}
		fmt.Printf("    round %d: initial %.0f rows/s (%.2f CPU s), incremental %.0f rows/s (%.2f CPU s), at parallelism 2 %.0f rows/s (%.2f CPU s)\n",
			r+1, ref[r], cpu["initial"][r], inc[r], cpu["incremental"][r], inc2[r], cpu["incremental_2"][r])
	}
	res := ratioResult("k", fmt.Sprintf("incremental snapshot of %d rows, SNAPSHOT_PARALLELISM 1 (chunks of the default SNAPSHOT_CHUNK_ROWS), against initial; at SNAPSHOT_PARALLELISM 2: %.0f rows/s, %.2f × initial; COPY to /dev/null %.0f rows/s, incremental ÷ COPY %.2f (parallelism 2: %.2f)",
		rows, median(inc2), median(inc2)/median(ref), copyRate, median(inc)/copyRate, median(inc2)/copyRate),
		"rows/s", "SNAPSHOT_MODE=initial", ref, inc, 0.8)
	res.Extra = cpuExtra(cpu, rows)
	return res, nil
}

func (b *bench) snapshot(rounds, rows int) (Result, error) {
	fmt.Printf("c: snapshot of %d rows\n", rows)
	if err := b.exec("TRUNCATE t"); err != nil {
		return Result{}, err
	}
	if err := b.exec(rowsSQL(1, rows)); err != nil {
		return Result{}, err
	}
	if err := b.exec("VACUUM ANALYZE t"); err != nil {
		return Result{}, err
	}
	copyRef := func() (time.Duration, error) {
		cmd := exec.Command(filepath.Join(b.cluster.BinDir, "psql"), "-X", "-q", "-d", b.dsn, "-c", "COPY t TO STDOUT")
		devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return 0, err
		}
		defer devnull.Close()
		var errb strings.Builder
		cmd.Stdout, cmd.Stderr = devnull, &errb // an os.File: psql writes to /dev/null itself
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("psql COPY: %w: %s", err, errb.String())
		}
		return time.Since(start), nil
	}
	if _, err := copyRef(); err != nil { // warm the cache and hint bits
		return Result{}, err
	}
	var ref, pgfRates []float64
	for r := 0; r < rounds; r++ {
		runRef := func() error {
			d, err := copyRef()
			ref = append(ref, float64(rows)/d.Seconds())
			return err
		}
		runPGF := func() error {
			slot := fmt.Sprintf("snap_%d", r)
			p, err := b.startPGF(slot, "t", "pub", "initial", nil, nil)
			if err != nil {
				return err
			}
			d, err := p.waitFor("the snapshot", 10*time.Minute, func() (bool, error) { return p.fel.CountedRows("t") >= rows, nil })
			if _, _, serr := p.stop(); err == nil {
				err = serr
			}
			if err == nil {
				pgfRates = append(pgfRates, float64(rows)/d.Seconds())
			}
			b.dropSlot(slot)
			return err
		}
		if err := alternate(r, runRef, runPGF); err != nil {
			return Result{}, err
		}
		fmt.Printf("    round %d: COPY %.0f rows/s, pgfeldera %.0f rows/s\n", r+1, ref[r], pgfRates[r])
	}
	return ratioResult("c", fmt.Sprintf("snapshot of %d rows (pgfeldera: process start to the last row in Feldera)", rows), "rows/s", "COPY TO STDOUT via psql", ref, pgfRates, 0.6), nil
}

// live runs pgbench at a fixed rate of 10-row transactions and measures,
// per row, the time from its clock_timestamp() at insert to its arrival in
// the double.
func (b *bench) live(rate int, dur time.Duration) (Result, error) {
	fmt.Printf("d: live, pgbench at %d rows/s for %s, BATCH_LINGER_MS=50\n", rate, dur)
	if err := b.createSlot("live"); err != nil {
		return Result{}, err
	}
	defer b.dropSlot("live")
	lat := &latencies{}
	p, err := b.startPGF("live", "live", "pub_live", "never", map[string]string{"BATCH_LINGER_MS": "50"}, lat.observe)
	if err != nil {
		return Result{}, err
	}
	script := filepath.Join(b.dir, "live.sql")
	if err := os.WriteFile(script, []byte("INSERT INTO live (payload) SELECT 'payload' FROM generate_series(1, 10);\n"), 0o644); err != nil {
		return Result{}, err
	}
	time.Sleep(time.Second) // connected and streaming
	lat.mu.Lock()
	lat.since = time.Now().Add(2 * time.Second) // skip pgbench's start
	lat.mu.Unlock()
	cmd := exec.Command(filepath.Join(b.cluster.BinDir, "pgbench"), "-n", "-f", script, "-R", fmt.Sprint(rate/10),
		"-T", fmt.Sprint(int(dur.Seconds())), "-c", "4", "-j", "2", b.dsn)
	// A logical walsender only sends flushed WAL: with the cluster's
	// synchronous_commit=off a commit would wait for the WAL writer
	// (wal_writer_delay, 200 ms) before any connector could see it.
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c synchronous_commit=on")
	out, err := cmd.CombinedOutput()
	if err != nil {
		p.stop()
		return Result{}, fmt.Errorf("pgbench: %w: %s", err, out)
	}
	time.Sleep(time.Second) // the tail arrives
	if _, _, err := p.stop(); err != nil {
		return Result{}, err
	}
	if lat.err != nil {
		return Result{}, lat.err
	}
	p50, p99, max, n := lat.percentiles()
	tps := ""
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "tps = ") {
			tps = strings.TrimSpace(l)
		}
	}
	fmt.Printf("    %d rows measured; p50 %.1f ms, p99 %.1f ms, max %.1f ms; pgbench: %s\n", n, p50, p99, max, tps)
	return Result{Workload: "d", What: fmt.Sprintf("live: pgbench -R %d × 10-row transactions for %s, BATCH_LINGER_MS=50; latency from clock_timestamp() at insert to arrival in the double", rate/10, dur),
		Unit: "ms", PGF: []float64{p99}, PGFMedian: p99, Target: "p99 ≤ 250 ms", Pass: p99 <= 250 && n > 0,
		Extra: map[string]any{"p50_ms": p50, "p99_ms": p99, "max_ms": max, "rows": n, "pgbench": tps}}, nil
}

type latencies struct {
	mu    sync.Mutex
	since time.Time
	ms    []float64
	err   error
}

// observe runs on the double's handler goroutines; the benchmark reads
// the slice only after the process stopped.
func (l *latencies) observe(_ string, body []byte, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(string(body), "\n") {
		i := strings.Index(line, `"ts":"`)
		if i < 0 {
			continue
		}
		s := line[i+6:]
		s = s[:strings.IndexByte(s, '"')]
		ts, err := time.Parse("2006-01-02T15:04:05.999999999Z07:00", s)
		if err != nil {
			l.err = fmt.Errorf("live row timestamp %q: %w", s, err)
			return
		}
		if ts.After(l.since) {
			l.ms = append(l.ms, float64(at.Sub(ts).Microseconds())/1000)
		}
	}
}

func (l *latencies) percentiles() (p50, p99, max float64, n int) {
	sort.Float64s(l.ms)
	n = len(l.ms)
	if n == 0 {
		return 0, 0, 0, 0
	}
	at := func(q float64) float64 { return l.ms[int(q*float64(n-1))] }
	return at(0.5), at(0.99), l.ms[n-1], n
}

// peakRSS alternates a 10k-row and an N-row transaction, each drained by a
// fresh pgfeldera process, and reports the peak RSS of each.
func (b *bench) peakRSS(rounds, rows int) (Result, error) {
	fmt.Printf("e: peak RSS, one transaction of 10000 vs %d rows\n", rows)
	var small, large []float64
	one := func(n int) (float64, error) {
		if err := b.exec("TRUNCATE t"); err != nil {
			return 0, err
		}
		slot := fmt.Sprintf("rss_%d", b.seq)
		if err := b.createSlot(slot); err != nil {
			return 0, err
		}
		defer b.dropSlot(slot)
		if err := b.exec(rowsSQL(1, n)); err != nil {
			return 0, err
		}
		end, err := b.lsn()
		if err != nil {
			return 0, err
		}
		p, err := b.startPGF(slot, "t", "pub", "never", nil, nil)
		if err != nil {
			return 0, err
		}
		_, err = p.waitFor("confirmed_flush_lsn", 10*time.Minute, func() (bool, error) {
			c, err := b.confirmed(slot)
			return c >= end, err
		})
		rss, _, serr := p.stop()
		if err == nil {
			err = serr
		}
		return float64(rss) / (1 << 20), err
	}
	for r := 0; r < rounds; r++ {
		s, err := one(10_000)
		if err != nil {
			return Result{}, err
		}
		l, err := one(rows)
		if err != nil {
			return Result{}, err
		}
		small, large = append(small, s), append(large, l)
		fmt.Printf("    round %d: 10k rows %.1f MiB, %d rows %.1f MiB\n", r+1, s, rows, l)
	}
	res := ratioResult("e", fmt.Sprintf("peak RSS of the pgfeldera process: %d-row transaction vs a 10,000-row one", rows), "MiB", "10,000-row transaction", small, large, 0)
	res.Target = "≤ 1.25 × the 10k-row figure and ≤ 64 MiB"
	res.Pass = res.Ratio <= 1.25 && res.PGFMedian <= 64
	return res, nil
}

// cpuExtra reports the CPU each process used: with the walsender as the
// ceiling, it is what pgfeldera takes from Postgres on a shared machine.
func cpuExtra(cpu map[string][]float64, rows int) map[string]any {
	m := map[string]any{}
	for k, v := range cpu {
		m["cpu_seconds_"+k] = v
		m["cpu_us_per_row_"+k] = median(v) * 1e6 / float64(rows)
	}
	return m
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func ratioResult(id, what, unit, refName string, ref, pgf []float64, min float64) Result {
	r := Result{Workload: id, What: what, Unit: unit, Reference: refName, Ref: ref, PGF: pgf,
		RefMedian: median(ref), PGFMedian: median(pgf)}
	if r.RefMedian > 0 {
		r.Ratio = r.PGFMedian / r.RefMedian
	}
	if min > 0 {
		r.Target = fmt.Sprintf("≥ %.1f × %s", min, refName)
		r.Pass = r.Ratio >= min
	}
	return r
}

func summary(r Result) string {
	if r.Ratio > 0 {
		return fmt.Sprintf("%.0f vs %.0f %s, ratio %.2f", r.PGFMedian, r.RefMedian, r.Unit, r.Ratio)
	}
	return fmt.Sprintf("%.1f %s", r.PGFMedian, r.Unit)
}

func printTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nworkload\treference (median)\tpgfeldera (median)\tratio\ttarget\tresult")
	for _, r := range results {
		ref, ratio := "-", "-"
		if r.Reference != "" {
			ref = fmt.Sprintf("%.1f %s (%s)", r.RefMedian, r.Unit, r.Reference)
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		verdict := "FAIL"
		if r.Pass {
			verdict = "ok"
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%.1f %s\t%s\t%s\t%s\n", r.Workload, short(r.What), ref, r.PGFMedian, r.Unit, ratio, r.Target, verdict)
	}
	tw.Flush()
}

func short(s string) string {
	if i := strings.IndexAny(s, ":("); i > 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}

// rawDrain reads slot's pgoutput stream and only counts insert messages,
// without decoding them, until it counted rows: the walsender's ceiling on
// this machine, with no client work beyond the protocol.
func (b *bench) rawDrain(slot, pub string, rows int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg, err := pgconn.ParseConfig(b.dsn)
	if err != nil {
		return 0, err
	}
	cfg.RuntimeParams["replication"] = "database"
	start := time.Now()
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	err = pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: []string{
		"proto_version '1'", "publication_names '" + pub + "'"}})
	if err != nil {
		return 0, fmt.Errorf("raw reader: %w", err)
	}
	var pos pglogrepl.LSN
	next := time.Now().Add(time.Second)
	for n := 0; n < rows; {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return 0, fmt.Errorf("raw reader after %d inserts: %w", n, err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 {
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.XLogDataByteID:
			// 1 byte tag, 24 bytes of header, then the pgoutput message.
			if len(cd.Data) > 25 && cd.Data[25] == 'I' {
				n++
			}
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			if pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:]); err == nil && pkm.ReplyRequested {
				next = time.Now()
			}
		}
		if time.Now().After(next) {
			next = time.Now().Add(time.Second)
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: pos}); err != nil {
				return 0, err
			}
		}
	}
	return time.Since(start), nil
}

// slowCompletion drains the same bulk load as a while the double completes
// each request d after it arrives, for d in 0, 50, 250 and 1000 ms (the
// order rotating per round), and reports throughput per delay and its
// ratio to 0 ms.
func (b *bench) slowCompletion(rounds, rows int) (Result, error) {
	delays := []time.Duration{0, 50 * time.Millisecond, 250 * time.Millisecond, time.Second}
	fmt.Printf("f: bulk catch-up of %d rows in 100 transactions, completion delayed %v\n", rows, delays)
	rates := map[time.Duration][]float64{}
	defer func() { b.delay = 0 }()
	for r := 0; r < rounds; r++ {
		if err := b.exec("TRUNCATE t"); err != nil {
			return Result{}, err
		}
		slots := make([]string, len(delays))
		for i := range delays {
			slots[i] = fmt.Sprintf("slow_%d_%d", r, i)
			if err := b.createSlot(slots[i]); err != nil {
				return Result{}, err
			}
		}
		if err := b.exec(bulkSQL(rows)); err != nil {
			return Result{}, err
		}
		end, err := b.lsn()
		if err != nil {
			return Result{}, err
		}
		for k := range delays {
			i := (k + r) % len(delays)
			b.delay = delays[i]
			d, _, err := b.drainPGF(slots[i], end, rows)
			if err != nil {
				return Result{}, fmt.Errorf("completion delay %s: %w", delays[i], err)
			}
			rates[delays[i]] = append(rates[delays[i]], float64(rows)/d.Seconds())
			b.dropSlot(slots[i])
		}
		fmt.Printf("    round %d:", r+1)
		for _, d := range delays {
			fmt.Printf(" %s %.0f rows/s;", d, rates[d][r])
		}
		fmt.Println()
	}
	base := median(rates[0])
	extra := map[string]any{}
	pass := true
	for _, d := range delays {
		ratio := median(rates[d]) / base
		extra[fmt.Sprintf("rows_per_s_%dms", d.Milliseconds())] = rates[d]
		extra[fmt.Sprintf("ratio_%dms", d.Milliseconds())] = ratio
		switch d {
		case 250 * time.Millisecond:
			pass = pass && ratio >= 0.9
		case time.Second:
			pass = pass && ratio >= 0.7
		}
	}
	slow := median(rates[250*time.Millisecond])
	return Result{Workload: "f", What: fmt.Sprintf("bulk catch-up of %d rows, each request completing 0/50/250/1000 ms after it arrives; ratio at 250 ms", rows),
		Unit: "rows/s", Reference: "0 ms completion", Ref: rates[0], PGF: rates[250*time.Millisecond], RefMedian: base, PGFMedian: slow, Ratio: slow / base,
		Target: "≥ 0.9 × at 250 ms, ≥ 0.7 × at 1000 ms", Pass: pass, Extra: extra}, nil
}

// wideRows drains one transaction of 1,000 rows of 512 KB (incompressible,
// STORAGE EXTERNAL) with a fresh process per round and reports its peak
// RSS and the largest request body.
func (b *bench) wideRows(rounds int) (Result, error) {
	const n, width = 1000, 512 << 10
	fmt.Printf("g: peak RSS, one transaction of %d rows × %d KB\n", n, width>>10)
	var rss, bodies []float64
	for r := 0; r < rounds; r++ {
		if err := b.exec("TRUNCATE wide"); err != nil {
			return Result{}, err
		}
		slot := fmt.Sprintf("wide_%d", r)
		if err := b.createSlot(slot); err != nil {
			return Result{}, err
		}
		// md5 of random input: hex that no compressor shrinks much, and
		// STORAGE EXTERNAL stores it uncompressed anyway.
		if err := b.exec(fmt.Sprintf(`INSERT INTO wide SELECT g, (SELECT string_agg(md5(random()::text || g || s), '') FROM generate_series(1, %d) s) FROM generate_series(1, %d) g`, width/32, n)); err != nil {
			return Result{}, err
		}
		end, err := b.lsn()
		if err != nil {
			return Result{}, err
		}
		var mu sync.Mutex
		var maxBody, lines int
		p, err := b.startPGF(slot, "wide", "pub_wide", "never", nil, func(_ string, body []byte, _ time.Time) {
			mu.Lock()
			defer mu.Unlock()
			maxBody = max(maxBody, len(body))
			lines += strings.Count(string(body), "\n")
		})
		if err != nil {
			return Result{}, err
		}
		_, err = p.waitFor("confirmed_flush_lsn", 10*time.Minute, func() (bool, error) {
			c, err := b.confirmed(slot)
			return c >= end, err
		})
		peak, _, serr := p.stop()
		if err == nil {
			err = serr
		}
		b.dropSlot(slot)
		if err == nil && lines < n {
			err = p.failure(fmt.Sprintf("let the slot confirm %s but the double counted %d rows, want %d", end, lines, n))
		}
		if err != nil {
			return Result{}, err
		}
		rss = append(rss, float64(peak)/(1<<20))
		bodies = append(bodies, float64(maxBody)/(1<<20))
		fmt.Printf("    round %d: peak RSS %.1f MiB, largest body %.1f MiB\n", r+1, rss[r], bodies[r])
	}
	m := median(rss)
	return Result{Workload: "g", What: fmt.Sprintf("peak RSS of the pgfeldera process for one transaction of %d rows × %d KB", n, width>>10),
		Unit: "MiB", PGF: rss, PGFMedian: m, Target: "≤ 64 MiB", Pass: m <= 64,
		Extra: map[string]any{"largest_body_mib": bodies}}, nil
}

// ackLatency runs pgbench at a fixed rate of 10-row transactions while the
// double completes each request 50 ms after it arrives, samples
// pg_current_wal_insert_lsn() and the slot's confirmed_flush_lsn every 5 ms, and
// reports, per sampled position, the time until the slot confirmed it.
func (b *bench) ackLatency(rate int, dur time.Duration) (Result, error) {
	fmt.Printf("i: commit → confirmed_flush_lsn, pgbench at %d rows/s for %s, completion 50 ms\n", rate, dur)
	p50, p99, mx, n, err := b.commitToConfirmed("ack", "live", "pub_live", "INSERT INTO live (payload) SELECT 'payload' FROM generate_series(1, 10);\n", rate/10, dur, nil)
	if err != nil {
		return Result{}, err
	}
	fmt.Printf("    %d positions; p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", n, p50, p99, mx)
	return Result{Workload: "i", What: fmt.Sprintf("commit → confirmed_flush_lsn: pgbench -R %d × 10-row transactions for %s, each request completing 50 ms after it arrives; sampled every 5 ms", rate/10, dur),
		Unit: "ms", PGF: []float64{p99}, PGFMedian: p99, Target: "p99 ≤ 150 ms", Pass: p99 <= 150 && n > 0,
		Extra: map[string]any{"p50_ms": p50, "p99_ms": p99, "max_ms": mx, "positions": n}}, nil
}

// commitToConfirmed runs pgbench with script at tps transactions per second
// for dur against a pgfeldera on slot whose requests complete 50 ms after
// they arrive, and returns the commit → confirmed_flush_lsn latencies.
func (b *bench) commitToConfirmed(slot, tables, pub, sql string, tps int, dur time.Duration, env map[string]string) (p50, p99, mx float64, n int, err error) {
	if err := b.createSlot(slot); err != nil {
		return 0, 0, 0, 0, err
	}
	defer b.dropSlot(slot)
	b.delay = 50 * time.Millisecond
	p, err := b.startPGF(slot, tables, pub, "never", env, nil)
	b.delay = 0
	if err != nil {
		return 0, 0, 0, 0, err
	}
	script := filepath.Join(b.dir, slot+".sql")
	if err := os.WriteFile(script, []byte(sql), 0o644); err != nil {
		return 0, 0, 0, 0, err
	}
	time.Sleep(time.Second)
	conn, err := pgx.Connect(context.Background(), b.dsn)
	if err != nil {
		p.stop()
		return 0, 0, 0, 0, err
	}
	defer conn.Close(context.Background())
	type sample struct {
		at              time.Time
		head, confirmed pglogrepl.LSN
	}
	var samples []sample
	stop := make(chan struct{})
	sampled := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				sampled <- nil
				return
			case <-time.After(5 * time.Millisecond):
			}
			var head, conf string
			if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text, coalesce(confirmed_flush_lsn::text, '0/0') FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&head, &conf); err != nil {
				sampled <- err
				return
			}
			h, _ := pglogrepl.ParseLSN(head)
			c, _ := pglogrepl.ParseLSN(conf)
			samples = append(samples, sample{time.Now(), h, c})
		}
	}()
	cmd := exec.Command(filepath.Join(b.cluster.BinDir, "pgbench"), "-n", "-f", script, "-R", fmt.Sprint(tps),
		"-T", fmt.Sprint(int(dur.Seconds())), "-c", "4", "-j", "2", b.dsn)
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c synchronous_commit=on")
	out, err := cmd.CombinedOutput()
	time.Sleep(time.Second)
	close(stop)
	if serr := <-sampled; err == nil {
		err = serr
	}
	if _, _, perr := p.stop(); err == nil {
		err = perr
	}
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("%w: %s", err, out)
	}
	// Skip pgbench's first 2 s; a position's latency is the first later
	// sample whose confirmed position reached it.
	lat := &latencies{}
	from := samples[0].at.Add(2 * time.Second)
	j := 0
	for i, s := range samples {
		if s.at.Before(from) || s.at.After(samples[len(samples)-1].at.Add(-time.Second)) {
			continue
		}
		if j < i {
			j = i
		}
		for j < len(samples) && samples[j].confirmed < s.head {
			j++
		}
		if j == len(samples) {
			break
		}
		lat.ms = append(lat.ms, float64(samples[j].at.Sub(s.at).Microseconds())/1000)
	}
	p50, p99, mx, n = lat.percentiles()
	return p50, p99, mx, n, nil
}

// transactionsCost measures FELDERA_TRANSACTIONS=auto against off on
// two-table transactions (one row into t, one into t2): the catch-up of
// txns of them, each mode on its own slot over the same WAL in alternating
// order, and commit → confirmed latency under a live load.
// catchUp measures, per FELDERA_TRANSACTIONS mode (off, auto), how fast
// pgfeldera catches up on what fill writes (rows rows into tables): each
// round truncates, creates a slot per mode, fills, and runs the modes in
// alternating order, each from its own slot.
func (b *bench) catchUp(rounds, rows int, tables, pub, fill string) (map[string][]float64, error) {
	modes := []string{"off", "auto"}
	rates := map[string][]float64{}
	for r := 0; r < rounds; r++ {
		if err := b.exec("TRUNCATE t, t2"); err != nil {
			return nil, err
		}
		slots := map[string]string{}
		for _, m := range modes {
			slots[m] = fmt.Sprintf("txn_%s_%d_%d", m, r, b.seq)
			if err := b.createSlot(slots[m]); err != nil {
				return nil, err
			}
		}
		if err := b.exec(fill); err != nil {
			return nil, err
		}
		end, err := b.lsn()
		if err != nil {
			return nil, err
		}
		for k := range modes {
			m := modes[(k+r)%len(modes)]
			p, err := b.startPGF(slots[m], tables, pub, "never", map[string]string{"FELDERA_TRANSACTIONS": m}, nil)
			if err != nil {
				return nil, err
			}
			d, err := p.waitFor("confirmed_flush_lsn "+end.String(), 10*time.Minute, func() (bool, error) {
				c, err := b.confirmed(slots[m])
				return c >= end, err
			})
			got := p.fel.CountedRows("t") + p.fel.CountedRows("t2")
			committed := p.fel.TransactionsCommitted()
			if _, _, serr := p.stop(); err == nil {
				err = serr
			}
			if err == nil && got < rows {
				err = fmt.Errorf("%s, FELDERA_TRANSACTIONS=%s: the double counted %d rows, want %d", tables, m, got, rows)
			}
			if err == nil && m == "auto" && committed == 0 {
				err = fmt.Errorf("%s, FELDERA_TRANSACTIONS=auto committed no Feldera transaction", tables)
			}
			if err != nil {
				return nil, err
			}
			rates[m] = append(rates[m], float64(rows)/d.Seconds())
			b.dropSlot(slots[m])
		}
		fmt.Printf("    round %d, %s: off %.0f rows/s, auto %.0f rows/s\n", r+1, tables, rates["off"][r], rates["auto"][r])
	}
	return rates, nil
}

func (b *bench) transactionsCost(rounds, txns, rate int, dur time.Duration) (Result, error) {
	fmt.Printf("j: FELDERA_TRANSACTIONS auto vs off: catch-up of %d two-table transactions, and of %d two-row transactions of one table; live at %d transactions/s\n", txns, txns, rate/10)
	rows := 2 * txns
	one := strings.ReplaceAll(rowsSQL(0, 0), "generate_series(0, 0)", "generate_series(i, i)")
	// Two tables, a row each: wrapped by auto since it was written.
	rates, err := b.catchUp(rounds, rows, "t,t2", "pub_two",
		fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP %s; INSERT INTO t2 VALUES (i, i, 1); COMMIT; END LOOP; END $$`, txns, one))
	if err != nil {
		return Result{}, err
	}
	// One table, two rows a transaction (a transfer): Feldera may feed a
	// request to its steps in parts, so auto wraps these too.
	two := strings.ReplaceAll(rowsSQL(0, 0), "generate_series(0, 0) g", fmt.Sprintf("(VALUES (i), (i + %d)) AS v(g)", txns))
	oneTable, err := b.catchUp(rounds, rows, "t", "pub",
		fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP %s; COMMIT; END LOOP; END $$`, txns, two))
	if err != nil {
		return Result{}, err
	}
	extra := map[string]any{}
	for _, m := range []string{"off", "auto"} {
		sql := "BEGIN;\nINSERT INTO live (payload) VALUES ('p');\nINSERT INTO t2 VALUES (100000000 + (random() * 1000000000)::bigint, 1, 1) ON CONFLICT DO NOTHING;\nCOMMIT;\n"
		p50, p99, mx, n, err := b.commitToConfirmed("lat_"+m, "live,t2", "pub_live_two", sql, rate/10, dur, map[string]string{"FELDERA_TRANSACTIONS": m})
		if err != nil {
			return Result{}, fmt.Errorf("latency, FELDERA_TRANSACTIONS=%s: %w", m, err)
		}
		fmt.Printf("    live, %s: %d positions; p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", m, n, p50, p99, mx)
		extra["p50_ms_"+m], extra["p99_ms_"+m], extra["max_ms_"+m] = p50, p99, mx
	}
	off, auto := median(rates["off"]), median(rates["auto"])
	extra["rows_per_s_off"], extra["rows_per_s_auto"] = rates["off"], rates["auto"]
	extra["one_table_rows_per_s_off"], extra["one_table_rows_per_s_auto"] = oneTable["off"], oneTable["auto"]
	extra["one_table_ratio"] = median(oneTable["auto"]) / median(oneTable["off"])
	fmt.Printf("    one table, two rows a transaction: auto/off %.2f\n", extra["one_table_ratio"])
	return Result{Workload: "j", What: fmt.Sprintf("catch-up of %d two-table transactions (t and t2, a row each), FELDERA_TRANSACTIONS=auto against off; p99 commit → confirmed under a live two-table load in Extra", txns),
		Unit: "rows/s", Reference: "FELDERA_TRANSACTIONS=off", Ref: rates["off"], PGF: rates["auto"], RefMedian: off, PGFMedian: auto, Ratio: auto / off,
		Target: "≥ 0.8 ×", Pass: auto/off >= 0.8, Extra: extra}, nil
}

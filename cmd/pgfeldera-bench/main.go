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
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
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
	only := flag.String("only", "abcdefghijkl", "workloads to run (h runs with a)")
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
	steps := []step{
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
		{"l", func() (Result, error) { return b.progressCost(*rounds, *rows, *txns) }},
	}
	b.raw = strings.Contains(*only, "h")
	failed := b.runSteps(&rep, *only, steps)
	if !writeReport(&rep, *out) {
		failed = true
	}
	if failed {
		return 1
	}
	return 0
}

// step is one workload: its letter in -only and its run.
type step struct {
	id string
	fn func() (Result, error)
}

// runSteps runs the workloads -only names into rep, in order; a failed one
// is reported and skipped, so the others still run, and the run fails.
func (b *bench) runSteps(rep *Report, only string, steps []step) (failed bool) {
	for _, s := range steps {
		if !strings.Contains(only, s.id) {
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
	return failed
}

// writeReport prints the results table and writes the JSON file; it
// returns false when the write fails, which fails the run.
func writeReport(rep *Report, out string) bool {
	ok := true
	rep.DurationS = time.Since(rep.Started).Seconds()
	printTable(os.Stdout, rep.Results)
	if data, err := json.MarshalIndent(rep, "", "  "); err == nil {
		if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "pgfeldera-bench:", err)
			ok = false
		} else {
			fmt.Printf("wrote %s (%.0f s)\n", out, rep.DurationS)
		}
	}
	return ok
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

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

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
	var samples []lsnSample
	stop := make(chan struct{})
	sampled := make(chan error, 1)
	go func() { sampled <- sampleLSNs(conn, slot, stop, &samples) }()
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
	p50, p99, mx, n = confirmLatencies(samples).percentiles()
	return p50, p99, mx, n, nil
}

// lsnSample is one sample of the WAL insert position and the slot's
// confirmed_flush_lsn, taken at the same instant.
type lsnSample struct {
	at              time.Time
	head, confirmed pglogrepl.LSN
}

// sampleLSNs appends a sample every 5 ms until stop closes, and returns the
// first failed query's error, which ends the sampling.
func sampleLSNs(conn *pgx.Conn, slot string, stop <-chan struct{}, samples *[]lsnSample) error {
	for {
		select {
		case <-stop:
			return nil
		case <-time.After(5 * time.Millisecond):
		}
		var head, conf string
		if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text, coalesce(confirmed_flush_lsn::text, '0/0') FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&head, &conf); err != nil {
			return err
		}
		h, _ := pglogrepl.ParseLSN(head)
		c, _ := pglogrepl.ParseLSN(conf)
		*samples = append(*samples, lsnSample{time.Now(), h, c})
	}
}

// confirmLatencies turns the samples into commit → confirmed latencies,
// one per sampled position, leaving out pgbench's start and the last second.
func confirmLatencies(samples []lsnSample) *latencies {
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
	return lat
}

package connector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

const benchPG = `CREATE TABLE t (id bigint PRIMARY KEY, name text, amount numeric(12,2), ts timestamptz, payload jsonb);
CREATE PUBLICATION pub FOR TABLE t;`

const benchFeldera = `CREATE TABLE t (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, amount DECIMAL(12,2), ts TIMESTAMP_TZ, payload VARIANT);`

// BenchmarkTransactionPeakMemory drains one transaction of N rows at
// BATCH_MAX_ROWS=10000 into a counting Feldera double and reports the peak
// Go heap and the peak RSS of the process while doing it. The outbox bound
// means the 1,000,000-row figure should stay close to the 10,000-row one.
//
//	go test ./connector -run '^$' -bench TransactionPeakMemory -benchtime 1x
func BenchmarkTransactionPeakMemory(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				heap, rss := drainOnce(b, n)
				b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MiB")
				b.ReportMetric(float64(rss)/(1<<20), "peak-rss-MiB")
			}
		})
	}
}

func drainOnce(b *testing.B, n int) (heapPeak, rssPeak uint64) {
	b.StopTimer()
	e := newEnvOn(b, pgcluster.Shared(b), benchPG, benchFeldera, func(c *felderatest.Config) { c.CountOnly = true })
	cfg := e.config("t")
	r := e.start(cfg)
	e.waitSlot()
	r.stop(e.t)
	e.exec(fmt.Sprintf(`INSERT INTO t SELECT g, 'name-' || g, g * 0.01, '2024-01-01'::timestamptz + g * interval '1 second',
		jsonb_build_object('k', g, 'v', 'payload') FROM generate_series(1, %d) g`, n))
	target := e.currentLSN()
	runtime.GC()
	resetPeakRSS()
	var stop atomic.Bool
	var peak atomic.Uint64
	go func() {
		var ms runtime.MemStats
		for !stop.Load() {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	b.StartTimer()
	r = e.start(cfg)
	e.waitConfirmed(target, 10*time.Minute)
	b.StopTimer()
	stop.Store(true)
	r.stop(e.t)
	if got := e.fel.CountedRows("t"); got < n {
		b.Fatalf("double counted %d rows, want %d", got, n)
	}
	return peak.Load(), peakRSS()
}

func resetPeakRSS() { os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func peakRSS() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// discardSink takes every batch at once and only counts lines: the
// snapshot benchmark measures Postgres → decode → outbox, not HTTP.
type discardSink struct {
	connector.Sink // Pipeline from the double
	mu             sync.Mutex
	lines          map[string]int
}

func (d *discardSink) Ingress(_ context.Context, table string, body []byte) (string, error) {
	d.mu.Lock()
	d.lines[table] += bytes.Count(body, []byte{'\n'})
	d.mu.Unlock()
	return "t", nil
}

func (d *discardSink) WaitCompleteStep(context.Context, string) (uint64, error) { return 0, nil }

func (d *discardSink) CompletionStep(context.Context, string) (bool, uint64, error) {
	return true, 0, nil
}

func (d *discardSink) Query(_ context.Context, sql string, fn func(json.RawMessage) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for table, n := range d.lines {
		if strings.HasSuffix(sql, `"`+table+`"`) && strings.Contains(sql, "COUNT(*)") {
			return fn(json.RawMessage(fmt.Sprintf(`{"count(*)":%d}`, n)))
		}
	}
	return fn(json.RawMessage(`{"count(*)":0}`))
}

// BenchmarkSnapshotThroughput copies 1,000,000 rows through
// COPY → decode → outbox → a discarding sink, next to the reference
// `COPY t TO STDOUT` into /dev/null on the same cluster, in the same run:
//
//	go test ./connector -run '^$' -bench SnapshotThroughput -benchtime 1x -count 3
func BenchmarkSnapshotThroughput(b *testing.B) {
	const rows int64 = 1_000_000
	e := newEnvOn(b, pgcluster.Shared(b), benchPG, benchFeldera, nil)
	// BENCH_SHUFFLED=1 writes the rows in random key order, so that the
	// heap's order is not the key's (a table grown by random keys, UUIDs):
	// key ranges then read their rows from all over the heap.
	order := ""
	if os.Getenv("BENCH_SHUFFLED") != "" {
		order = " ORDER BY random()"
	}
	e.exec(fmt.Sprintf(`INSERT INTO t SELECT g, 'name-' || g, g * 0.01, '2024-01-01'::timestamptz + g * interval '1 second',
		jsonb_build_object('k', g, 'v', 'payload') FROM generate_series(1, %d) g%s`, rows, order))
	e.exec("VACUUM ANALYZE t")
	b.Run("reference_copy_to_devnull", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if _, err := e.db.PgConn().CopyTo(context.Background(), io.Discard, "COPY t TO STDOUT"); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(rows)/time.Since(start).Seconds(), "rows/s")
		}
	})
	for _, mode := range []struct {
		name  string
		mode  string
		lanes int
		byKey bool
	}{{"pgfeldera_snapshot", connector.SnapshotInitial, 1, false},
		{"pgfeldera_incremental", connector.SnapshotIncremental, 1, false}, {"pgfeldera_incremental_2", connector.SnapshotIncremental, 2, false},
		{"pgfeldera_incremental_keys", connector.SnapshotIncremental, 1, true}, {"pgfeldera_incremental_keys_2", connector.SnapshotIncremental, 2, true}} {
		b.Run(mode.name, func(b *testing.B) { benchSnapshot(b, e, rows, mode.mode, mode.lanes, mode.byKey) })
	}
}

func benchSnapshot(b *testing.B, e *env, rows int64, mode string, lanes int, byKey bool) {
	{
		for i := 0; i < b.N; i++ {
			sink := &discardSink{Sink: e.client, lines: map[string]int{}}
			cfg := e.config("t")
			cfg.SnapshotMode = mode
			cfg.SnapshotParallelism = lanes
			if v := os.Getenv("BENCH_CHUNK_ROWS"); v != "" {
				cfg.SnapshotChunkRows, _ = strconv.Atoi(v)
			}
			cfg.StateFile = b.TempDir() + "/state.json"
			cfg.Slot = fmt.Sprintf("%s_%s_%d_%d", e.slot, mode, lanes, i)
			c := e.newConnector(cfg, sink)
			if byKey {
				connector.ChunkByKey(c)
			}
			start := time.Now()
			r := e.run(c)
			for c.Stats().SnapshotRows.Load() < rows {
				time.Sleep(time.Millisecond)
			}
			el := time.Since(start)
			r.stop(e.t)
			e.dropSlot(cfg.Slot)
			b.ReportMetric(float64(rows)/el.Seconds(), "rows/s")
		}
	}
}

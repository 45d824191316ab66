package crashtest_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/setup"
)

var randomRuns = flag.Int("crashtest.random", 25, "randomised crash histories to run (CRASHTEST_SEED fixes the first seed)")

// suiteProgress runs the crash matrix and the random histories with the
// progress table declared by the pipeline, which the default setting
// (FELDERA_PROGRESS_TABLE=auto) then uses.
var suiteProgress = flag.Bool("crashtest.progress", false, "run the crash matrix and the random crash histories with the progress table")

// progressEnv leaves FELDERA_PROGRESS_TABLE unset (empty is unset): the
// default, auto, uses the table exactly when the double declares it.
func progressEnv() string { return "FELDERA_PROGRESS_TABLE=" }

// history generates a random workload: inserts, non-key and key-changing
// updates, deletes, truncates, multi-table and large transactions.
func history(r *rand.Rand) []string {
	var out []string
	next := 1
	for i, n := 0, 8+r.IntN(12); i < n; i++ {
		switch k := r.IntN(10); {
		case k < 3:
			m := 1 + r.IntN(80)
			out = append(out, fmt.Sprintf("INSERT INTO users SELECT g, 'h%d', g FROM generate_series(%d, %d) g", i, next, next+m-1))
			next += m
		case k < 4:
			m := 150 + r.IntN(250) // larger than BATCH_MAX_ROWS
			out = append(out, fmt.Sprintf("INSERT INTO users SELECT g, 'large', g FROM generate_series(%d, %d) g", next, next+m-1))
			next += m
		case k < 5:
			out = append(out, fmt.Sprintf("UPDATE users SET name = 'u%d', score = score + 1 WHERE id %% %d = 0", i, 2+r.IntN(5)))
		case k < 6:
			out = append(out, fmt.Sprintf("UPDATE users SET id = %d WHERE id = (SELECT min(id) FROM users WHERE id %% %d = 1)", next, 2+r.IntN(3)))
			next++
		case k < 7:
			out = append(out, fmt.Sprintf("DELETE FROM users WHERE id %% %d = %d", 3+r.IntN(5), r.IntN(3)))
		case k < 8:
			out = append(out, fmt.Sprintf("BEGIN; INSERT INTO users VALUES (%d, 'tx', 0); INSERT INTO items SELECT g, 'r%d', 2.5 FROM generate_series(1, %d) g ON CONFLICT DO NOTHING; DELETE FROM items WHERE sku = %d; COMMIT",
				next, i, 1+r.IntN(30), r.IntN(30)))
			next++
		case k < 9:
			if r.IntN(3) == 0 {
				out = append(out, "TRUNCATE users, items")
			} else {
				out = append(out, "TRUNCATE items")
			}
		default:
			out = append(out, fmt.Sprintf("BEGIN; DELETE FROM users WHERE id = %d; INSERT INTO users VALUES (%d, 'reinserted', 1); COMMIT", next-1, next-1))
		}
	}
	return out
}

// truncatedTables counts the tables the history's TRUNCATEs name: the
// after_retract point is passed once per truncated table.
func truncatedTables(stmts []string) int {
	n := 0
	for _, q := range stmts {
		if rest, ok := strings.CutPrefix(q, "TRUNCATE "); ok {
			n += strings.Count(rest, ",") + 1
		}
	}
	return n
}

var (
	randomPoints   = append(append([]string{}, streamPoints...), "after_retract")
	snapshotPoints = []string{"snapshot_after_batch", "snapshot_before_state"}
)

// maxFallbacks is the share of histories allowed to miss their crash point
// (and be SIGKILLed at an arbitrary moment instead): more means the
// histories no longer exercise the points they name.
const maxFallbacks = 0.2

// TestCrashRandom runs seeded random histories, each crashed at a random
// point (or SIGKILLed when the point is not reached), restarted and
// checked. A quarter of them start from pre-existing rows and crash inside
// the initial snapshot. CRASHTEST_SEED=<n> reproduces a failure.
func TestCrashRandom(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	if testing.Short() {
		t.Skip("random crash histories: not in -short")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CRASHTEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CRASHTEST_SEED=%q: %v", s, err)
		}
		seed = v
	}
	var hits, fallbacks, firstPostMax, fencedRestarts atomic.Int64
	for i := 0; i < *randomRuns; i++ {
		s := seed + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			r := rand.New(rand.NewPCG(s, s))
			stmts := history(r)
			point := randomPoints[r.IntN(len(randomPoints))]
			pre := 0
			if r.IntN(4) == 0 {
				point = snapshotPoints[r.IntN(len(snapshotPoints))]
				pre = 500 + r.IntN(2500)
			}
			n := 1 + r.IntN(3)
			switch point {
			case "snapshot_before_state":
				n = 1 // reached once per snapshot
			case "after_ack":
				// Under exactly_once (the double here) completions are
				// acknowledged together at the watcher's next look, so a
				// short history gets one or two acknowledgements (drawn
				// still, so later draws keep their seeds).
				n = 1
			case "after_retract":
				// passed once per truncated table: name one that happens
				if retracts := truncatedTables(stmts); retracts == 0 {
					point = streamPoints[r.IntN(len(streamPoints))]
				} else {
					n = 1 + r.IntN(min(retracts, 3))
				}
			}
			// Odd seeds run at default settings with the progress table
			// declared, which the default (auto) then uses; even ones
			// without it (every one under -crashtest.progress).
			withTable := *suiteProgress || s%2 == 1
			w := newSuiteWorld(t, withTable)
			if pre > 0 {
				w.exec(fmt.Sprintf("INSERT INTO users SELECT g, 'pre', g FROM generate_series(-%d, -1) g", pre))
				w.exec(fmt.Sprintf("INSERT INTO items SELECT g, 'pre', 1 FROM generate_series(1000, %d) g", 1000+pre/10))
			}
			// A third of them seal batches by bytes (2 KiB: about 40 rows)
			// rather than by BATCH_MAX_ROWS.
			bytesBound := "BATCH_MAX_BYTES=4MiB"
			if r.IntN(3) == 0 {
				bytesBound = "BATCH_MAX_BYTES=2KiB"
			}
			// Batches in flight: 1 (each waits for the one before), 4 or
			// the default 16; a third of the histories run against steps
			// that take 20 ms, so that several batches really overlap.
			inFlight := fmt.Sprintf("BATCH_MAX_IN_FLIGHT=%d", []int{1, 4, 16}[r.IntN(3)])
			slow := r.IntN(3) == 0
			if slow {
				w.fel.SetCompletionDelay(20 * time.Millisecond)
			}
			// Half of those that start from pre-existing rows read them
			// incrementally, the history running during the chunks (drawn
			// last, so that earlier seeds keep their histories).
			mode := "SNAPSHOT_MODE=initial"
			lanes := "SNAPSHOT_PARALLELISM=1"
			if pre > 0 && r.IntN(2) == 0 {
				mode, point, n = "SNAPSHOT_MODE=incremental", "snapshot_after_chunk", 1+r.IntN(5)
				// one to three lanes, cut at the histogram ANALYZE makes
				lanes = fmt.Sprintf("SNAPSHOT_PARALLELISM=%d", 1+r.IntN(3))
				w.exec("ANALYZE users")
			}
			if mode == "SNAPSHOT_MODE=initial" {
				w.mirrorKeyless()
			}
			settings := bytesBound + " " + inFlight + fmt.Sprintf(" slow_steps=%v", slow) + " " + mode + " " + lanes
			progress := progressEnv()
			settings += fmt.Sprintf(" progress_table=%v", withTable)
			p := w.start("CRASH_AT="+point, fmt.Sprintf("CRASH_AFTER_BATCHES=%d", n), bytesBound, inFlight, mode, lanes, progress)
			seeded(w, p, pre > 0)
			if pre > 0 && point != "snapshot_after_chunk" {
				// Let the snapshot reach its point first: a TRUNCATE in the
				// history would otherwise empty the table under the copy
				// (TRUNCATE is not MVCC-safe), leaving no batch to crash in.
				// Waited for: the process exits there, or the snapshot ends.
				w.until(60*time.Second, 10*time.Millisecond, func() bool { return exitedNow(p) || stateComplete(w) })
			}
			for _, q := range stmts {
				w.exec(q)
			}
			how := "crash point"
			if code := w.crashedOrCaughtUp(p); code != 70 {
				p.kill() // not reached: an abrupt kill instead
				how = "SIGKILL"
				fallbacks.Add(1)
			} else {
				hits.Add(1)
			}
			w.fel.Restart() // Feldera restarts too, losing what no step took
			restart := time.Now()
			// The restart logs at debug level: a failure below prints its
			// log, which then shows each chunk's read.
			p2 := w.start(bytesBound, inFlight, mode, progress, "LOG_LEVEL=debug")
			if msg := w.caughtUp(p2, 60*time.Second); msg != "" {
				t.Fatalf("CRASHTEST_SEED=%d (%s at %s/%d, %d rows before, %s): %s\nhistory:\n%s", s, how, point, n, pre, settings, msg, strings.Join(stmts, ";\n"))
			}
			if code := p2.stop(t); code != 0 {
				t.Fatalf("CRASHTEST_SEED=%d: restart exited %d", s, code)
			}
			first := w.firstPostAfter(restart)
			fenced := p2.fenced()
			if msg := checkFirstPost(point, fenced, p2.waitedFence(), first); how == "crash point" && msg != "" {
				t.Fatalf("CRASHTEST_SEED=%d (%s): %s\nthe restart's log:\n%s", s, settings, msg, excerpt(p2.output(), 30000))
			}
			if m := w.maxLines(); m > maxRequestLines {
				t.Fatalf("CRASHTEST_SEED=%d: a request carried %d lines, more than BATCH_MAX_ROWS=%d", s, m, batchMaxRows)
			}
			if fenced {
				fencedRestarts.Add(1)
			}
			for !fenced {
				cur := firstPostMax.Load()
				if int64(first) <= cur || firstPostMax.CompareAndSwap(cur, int64(first)) {
					break
				}
			}
			firstPost := "none needed"
			if first >= 0 {
				firstPost = first.Round(time.Millisecond).String()
			}
			if fenced {
				firstPost += " (fenced: a POST was outstanding)"
			}
			t.Logf("CRASHTEST_SEED=%d: %d statements, %d rows before, %s at %s/%d, %s, restart → first POST %s, nothing lost", s, len(stmts), pre, how, point, n, settings, firstPost)
		})
	}
	total := hits.Load() + fallbacks.Load()
	t.Logf("random histories: %d of %d reached their crash point, %d fell back to SIGKILL; %d restarts waited the fence (a POST was outstanding); slowest unfenced restart → first POST %s",
		hits.Load(), total, fallbacks.Load(), fencedRestarts.Load(), time.Duration(firstPostMax.Load()).Round(time.Millisecond))
	if total > 0 && float64(fallbacks.Load()) > maxFallbacks*float64(total) {
		t.Fatalf("%d of %d histories missed their crash point (more than %.0f%%): the histories no longer exercise the points they name", fallbacks.Load(), total, maxFallbacks*100)
	}
}

// crashedOrCaughtUp waits until p exits (its code) or is done with all
// there is: its snapshot complete (an incremental one runs on beside the
// stream) and the WAL's current end acknowledged. Then its crash point
// can only still come right behind that acknowledgement (after_ack is
// passed just after the status update is sent), so it gets until it has
// been idle a moment (proc.exited) before it counts as not reached (-1).
// It waits for as long as something moves (world.until): no clock
// decides whether the point was reached.
func (w *world) crashedOrCaughtUp(p *proc) int {
	w.t.Helper()
	target := w.lsn("SELECT pg_current_wal_insert_lsn()::text")
	w.until(60*time.Second, 10*time.Millisecond, func() bool {
		return exitedNow(p) || p.streaming() && stateComplete(w) && w.confirmed() >= target
	})
	return p.exited(2 * time.Second)
}

// suiteDouble is crashDouble, declaring the progress table and the
// keyless mirror (mirrorKeyless) under -crashtest.progress.
func suiteDouble(c *felderatest.Config) {
	crashDouble(c)
	if *suiteProgress {
		tableDouble(c)
	}
}

// progressDouble is crashDouble with the progress table declared.
func progressDouble(c *felderatest.Config) {
	crashDouble(c)
	c.Tables = felderatest.MustParseDDL(felderaDDL + setup.ProgressDDL)
}

// tableDouble declares the progress table and the keyless mirror's
// events beside the harness's tables.
func tableDouble(c *felderatest.Config) {
	c.Tables = felderatest.MustParseDDL(felderaDDL + keylessDDL + setup.ProgressDDL)
}

// newSuiteWorld is a world on suiteDouble, or with the table when
// withTable says so.
func newSuiteWorld(t *testing.T, withTable bool) *world {
	w := newWorld(t, func(c *felderatest.Config) {
		suiteDouble(c)
		if withTable {
			tableDouble(c)
		}
	})
	w.declared = withTable || *suiteProgress
	return w
}

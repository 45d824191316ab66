package crashtest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/setup"
)

var streamPoints = []string{"after_decode", "after_post", "after_complete", "after_ack"}

// workload is one history the matrix crashes in.
type workload struct {
	name   string
	points map[string][]int // crash point → the batch counts it is reached with
	setup  func(w *world)   // before the first process starts
	// truncates: a replay may rightly drop rows of the crashed batch that
	// a later TRUNCATE discards, so its changes are not all sent again
	// (the oracle still sees a loss).
	truncates bool
	// timed: the history depends on timing (a writer running until the
	// snapshot completes), so the crashed batch's changes cannot be
	// matched with a clean run's, and an incremental chunk read again may
	// rightly drop a row the stream then carries; the oracle still sees
	// a loss.
	timed bool
	// keepFeldera: Feldera is not restarted after the crash, so a Feldera
	// transaction the crashed process left open is still open when the
	// next one starts (see txnPoints).
	keepFeldera bool
	env         []string // added to matrixEnv for every run of the workload
	run         func(w *world, p *proc, snapshotPoint bool)
	// check, when set, looks at what both processes of a case printed:
	// "" when the case did what the workload is about.
	check func(out string) string
}

func stream(ns ...int) map[string][]int {
	m := map[string][]int{}
	for _, p := range streamPoints {
		m[p] = ns
	}
	return m
}

func with(m map[string][]int, point string, ns ...int) map[string][]int {
	m[point] = ns
	return m
}

// seeded waits until this process finished its startup plan (a snapshot,
// or none) and streams, unless the case crashes inside the snapshot. It
// waits as long as something moves (world.until); what follows fails a
// process that never streamed.
func seeded(w *world, p *proc, snapshotPoint bool) {
	if snapshotPoint {
		return
	}
	w.until(60*time.Second, 10*time.Millisecond, func() bool { return p.streaming() || exitedNow(p) })
}

// step runs one statement, then waits until the process acknowledged it
// or died: every statement becomes its own batch and acknowledgement, so
// the n-th batch a crash point names is the one the case means. An
// acknowledgement that never comes from a live process fails the case.
func (w *world) step(p *proc, sql string) {
	w.t.Helper()
	w.exec(sql)
	if !w.acked(p, 30*time.Second) && !exitedNow(p) {
		w.t.Fatalf("%s: not acknowledged (nothing moved for 30 s)\n%s", sql, w.log())
	}
}

func mixedRun(w *world, p *proc, snap bool) {
	seeded(w, p, snap)
	w.step(p, "INSERT INTO users SELECT g, 'u' || g, g FROM generate_series(1, 150) g")
	w.step(p, "INSERT INTO items SELECT g, 'eu', g * 1.5 FROM generate_series(1, 40) g")
	w.step(p, "UPDATE users SET name = 'renamed' WHERE id <= 20")
	w.step(p, "UPDATE users SET id = 1000 WHERE id = 21")
	w.step(p, "UPDATE items SET region = 'us' WHERE sku = 3")
	w.step(p, "DELETE FROM users WHERE id BETWEEN 30 AND 39")
	w.step(p, "DELETE FROM users WHERE id = 40")
	w.step(p, "INSERT INTO users VALUES (40, 'back', 0)")
	w.step(p, "BEGIN; INSERT INTO users VALUES (2000, 'tx', 1); UPDATE items SET price = 0 WHERE sku = 1; DELETE FROM items WHERE sku = 2; COMMIT")
	w.step(p, "UPDATE users SET score = score + 1 WHERE id > 100")
}

// writeDuring commits single-row transactions on its own connection until
// the snapshot completed (or the process died) and 30 more after that.
func writeDuring(w *world, p *proc, from int) { writeDuringThen(w, p, from, 30) }

// writeDuringThen is writeDuring with tail statements after the snapshot
// (see mutateDuring for why the matrix wants more).
func writeDuringThen(w *world, p *proc, from, tail int) {
	id := from
	duringThen(w, p, tail, func(conn *pgx.Conn) error {
		id++
		_, err := conn.Exec(context.Background(), "INSERT INTO users VALUES ($1, 'live', 0)", id-1)
		return err
	})
}

// during runs one statement after another on its own connection until the
// snapshot completed (or the process died), and 30 more after that.
func during(w *world, p *proc, stmt func(conn *pgx.Conn) error) { duringThen(w, p, 30, stmt) }

// duringThen is during, going on for tail statements once the snapshot is
// complete.
func duringThen(w *world, p *proc, tail int, stmt func(conn *pgx.Conn) error) {
	conn, err := pgx.Connect(context.Background(), w.dsn)
	if err != nil {
		w.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for after := -1; after != 0; {
		if err := stmt(conn); err != nil {
			w.t.Fatal(err)
		}
		if after > 0 {
			after--
		} else if after < 0 && (stateComplete(w) || exitedNow(p)) {
			after = tail
		}
		time.Sleep(time.Millisecond)
	}
}

func exitedNow(p *proc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func stateComplete(w *world) bool {
	b, err := os.ReadFile(w.dir + "/state.json")
	return err == nil && !strings.Contains(string(b), `"pending"`) && !strings.Contains(string(b), `"incremental"`)
}

// mutateDuring inserts, updates and deletes random keys of users (those
// the setup wrote and more), as during does.
//
// It goes on for 3,000 statements (a few seconds) after the snapshot:
// under exactly_once acknowledgements wait for the watcher's next look at
// the pipeline (every 2 s), so a short tail would be one acknowledgement,
// and the matrix crashes after the third.
func mutateDuring(w *world, p *proc, keys int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed))
	duringThen(w, p, 3000, func(conn *pgx.Conn) error {
		q := []string{
			"INSERT INTO users VALUES ($1, 'ins', 0) ON CONFLICT (id) DO UPDATE SET name = 'reins'",
			"UPDATE users SET name = 'upd', score = score + 1 WHERE id = $1",
			"DELETE FROM users WHERE id = $1",
		}[r.IntN(3)]
		_, err := conn.Exec(context.Background(), q, 1+r.IntN(keys))
		return err
	})
}

var workloads = []workload{
	{
		name: "mixed",
		// the ninth statement touches both tables: one Feldera transaction
		points: with(with(with(stream(1, 2, 3), "snapshot_before_state", 1), "after_begin", 1), "before_commit", 1),
		run:    mixedRun,
	},
	{
		name:   "snapshot",
		points: with(with(stream(1, 2, 3), "snapshot_after_batch", 1, 2, 3), "snapshot_before_state", 1),
		setup: func(w *world) {
			w.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 30000) g")
			w.exec("INSERT INTO items SELECT g, 'eu', g FROM generate_series(1, 3000) g")
		},
		run: func(w *world, p *proc, snap bool) { writeDuringThen(w, p, 100000, 3000) },
	},
	{
		name:      "truncate",
		truncates: true,
		// the first TRUNCATE retracts 250 rows in three batches of 100
		points: with(with(stream(1, 2, 3), "after_retract", 1, 2, 3), "retract_after_batch", 1, 2, 3),
		run: func(w *world, p *proc, snap bool) {
			seeded(w, p, snap)
			w.step(p, "INSERT INTO users SELECT g, 'u', g FROM generate_series(1, 250) g")
			w.step(p, "INSERT INTO items SELECT g, 'eu', 1 FROM generate_series(1, 20) g")
			w.step(p, "TRUNCATE users")
			w.step(p, "INSERT INTO users SELECT g, 'again', g FROM generate_series(1, 50) g")
			w.step(p, "BEGIN; INSERT INTO users SELECT g, 'discarded', g FROM generate_series(100, 150) g; TRUNCATE users; INSERT INTO users VALUES (7, 'after', 7); COMMIT")
			w.step(p, "TRUNCATE users, items")
			w.step(p, "INSERT INTO users VALUES (8, 'last', 8)")
		},
	},
	{
		name: "large_transaction",
		// its first statement spans ten batches: one Feldera transaction
		points: with(with(stream(1, 2, 3), "after_begin", 1), "before_commit", 1),
		run: func(w *world, p *proc, snap bool) {
			seeded(w, p, snap)
			w.step(p, "INSERT INTO users SELECT g, 'big', g FROM generate_series(1, 1000) g") // 10 batches of 100
			w.step(p, "UPDATE users SET name = 'big2' WHERE id % 3 = 0")
			w.step(p, "DELETE FROM users WHERE id > 990")
			w.step(p, "INSERT INTO items VALUES (1, 'eu', 1)")
		},
	},
	{
		// large_transaction again, crashing while its Feldera transaction
		// is open (a later batch decoded, a POST inside it answered, the
		// transaction begun, everything sent) with Feldera left running.
		name:        "transaction_open",
		keepFeldera: true,
		points: map[string][]int{"after_decode": {2, 3}, "after_post": {1, 2, 3},
			"after_begin": {1}, "before_commit": {1}},
		run: func(w *world, p *proc, snap bool) {
			seeded(w, p, snap)
			w.step(p, "INSERT INTO users SELECT g, 'big', g FROM generate_series(1, 1000) g")
			w.step(p, "INSERT INTO items VALUES (1, 'eu', 1)")
		},
	},
	{
		// the snapshot loaded as one Feldera transaction, crashed inside
		// it: the next start commits it and resnapshots with retraction
		name:        "snapshot_transaction",
		keepFeldera: true,
		env:         []string{"SNAPSHOT_TRANSACTION=true"},
		points:      map[string][]int{"snapshot_after_batch": {1, 3}, "after_begin": {1}, "before_commit": {1}},
		setup: func(w *world) {
			w.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 3000) g")
			w.exec("INSERT INTO items SELECT g, 'eu', g FROM generate_series(1, 300) g")
		},
		run: func(w *world, p *proc, snap bool) { writeDuringThen(w, p, 100000, 3000) },
	},
	{
		// an incremental snapshot (chunks of SNAPSHOT_CHUNK_ROWS=100, in two
		// lanes) under a writer changing random keys of the table being read
		name:   "incremental",
		timed:  true,
		env:    []string{"SNAPSHOT_MODE=incremental", "SNAPSHOT_PARALLELISM=2"},
		points: with(stream(1, 3), "snapshot_after_chunk", 1, 2, 5),
		setup: func(w *world) {
			w.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 3000) g")
			w.exec("ANALYZE users")
			w.exec("INSERT INTO items SELECT g, 'eu', g FROM generate_series(1, 300) g")
		},
		run: func(w *world, p *proc, snap bool) { mutateDuring(w, p, 3300, 17) },
		check: func(out string) string {
			if !strings.Contains(out, "reading the table in lanes") {
				return "users was not read in lanes"
			}
			return ""
		},
	},
	{
		name: "resnapshot_after_dropped_slot",
		points: with(with(with(with(stream(1), "snapshot_after_batch", 1, 2, 3), "snapshot_before_state", 1),
			"after_retract", 1, 2), "retract_after_batch", 1),
		setup: func(w *world) {
			w.exec("INSERT INTO users SELECT g, 'seed', g FROM generate_series(1, 500) g")
			w.exec("INSERT INTO items SELECT g, 'eu', g FROM generate_series(1, 100) g")
			p := w.start(progressEnv())
			w.waitState(60 * time.Second)
			if msg := w.caughtUp(p, 60*time.Second); msg != "" {
				w.t.Fatalf("seeding: %s", msg)
			}
			if code := p.stop(w.t); code != 0 {
				w.t.Fatalf("seeding run exited %d\n%s", code, w.log())
			}
			w.dropSlot()
			w.exec("DELETE FROM users WHERE id <= 50")
			w.exec("UPDATE users SET name = 'while down' WHERE id BETWEEN 51 AND 100")
			w.exec("DELETE FROM items WHERE sku <= 10")
		},
		run: func(w *world, p *proc, snap bool) {
			seeded(w, p, snap)
			w.step(p, "INSERT INTO users VALUES (9001, 'after resnapshot', 0)")
			w.step(p, "UPDATE users SET score = 0 WHERE id = 200")
		},
	},
}

type outcome struct {
	workload, point string
	batches         int
	replayed, lost  int
	firstPost       time.Duration // restart → first ingress request; -1: none was needed
	fenced          bool          // a POST was outstanding at the crash: the restart waited the fence
	err             string
}

// replayRequired lists the points after which the crashed batch was not
// acknowledged, so the restart must send it again.
var replayRequired = map[string]bool{"after_post": true, "after_complete": true}

// heldPoints crash, under the progress table, where everything sent was
// committed with its progress row, except what a Feldera transaction
// still open holds (a flush that ended inside a source transaction):
// Feldera restarting too drops it and the restart sends it again
// (openLines); Feldera kept, the restart joins it and sends none of it
// again, counting what its ingress endpoints took (delivery/txncount.go).
// At after_complete and after_ack the poster may be inside its next
// flush, whose POSTs Feldera's restart may drop unseen by the request
// log.
var heldPoints = map[string]bool{"after_decode": true, "after_post": true}

// incrementalWorkload reads its tables in chunks, which keyless tables
// cannot be (mirrorKeyless).
func incrementalWorkload(wl workload) bool {
	return slices.Contains(wl.env, "SNAPSHOT_MODE=incremental")
}

// heldResent is what the restart sends again at a heldPoint: what the
// open transaction held when Feldera's restart dropped it, else nothing.
func heldResent(run1 []felderatest.Request, restarted bool) int {
	if restarted {
		return openLines(run1)
	}
	return 0
}

// openLines is how many changes run1 posted after its last progress row:
// what the Feldera transaction it left open held.
func openLines(run1 []felderatest.Request) int {
	n := 0
	for _, r := range run1 {
		if r.Table == setup.ProgressTable {
			n = 0
			continue
		}
		n += r.Inserts + r.Deletes + r.Updates
	}
	return n
}

// txnPoints crash with a Feldera transaction open. Feldera is not
// restarted after them, so the transaction is still open when the next
// process starts: it must commit it (nothing may be left open, or every
// checkpoint of the pipeline waits) and still lose nothing.
var txnPoints = map[string]bool{"after_begin": true, "before_commit": true}

// matrixEnv is what every matrix run adds to the harness's settings: a
// byte bound (about 80 of the workloads' rows) that seals batches before
// BATCH_MAX_ROWS=100 does, so both bounds cut batches, with the default 64
// batches in flight.
var matrixEnv = []string{"BATCH_MAX_BYTES=4KiB"}

// ingressFence is the harness's FELDERA_INGRESS_FENCE. A restart after a
// crash that left no ingress request outstanding must not wait it: its
// log shows no fence, and its first POST comes sooner than a fence would
// let it. A POST may be outstanding only at the points where a batch
// completes while the next one is being sent (concurrentPoints); the
// restart then waits the fence, and not much more.
const ingressFence = 4 * time.Second

// snapshot_after_chunk too: a chunk is recorded once the acknowledged
// position passes it, while the stream goes on posting.
var concurrentPoints = map[string]bool{"after_complete": true, "after_ack": true, "snapshot_after_chunk": true}

// checkFirstPost says what is wrong with a restart's first POST, if
// anything: fenced is whether the restart found a request outstanding,
// waited whether it held its ingress behind a fence.
func checkFirstPost(point string, fenced, waited bool, first time.Duration) string {
	switch {
	case fenced && !concurrentPoints[point]:
		return fmt.Sprintf("the restart found an ingress request outstanding after a crash at %s, where none can be", point)
	case fenced && first > ingressFence+3*time.Second:
		// No lower bound here: the dead process's outstanding request may
		// reach the double just after the restart began, and counts as its
		// "first request". That the wait holds is fence_test.go's business.
		return fmt.Sprintf("the restart after a crash with a POST outstanding sent its first request %s after it started, want at most FELDERA_INGRESS_FENCE=%s and a little", first.Round(time.Millisecond), ingressFence)
	case !fenced && waited:
		return fmt.Sprintf("the restart held its ingress behind a fence, though nothing was outstanding at %s", point)
	case !fenced && first >= ingressFence:
		return fmt.Sprintf("the restart sent its first request %s after it started, as late as a fence would (FELDERA_INGRESS_FENCE=%s): nothing was outstanding at %s", first.Round(time.Millisecond), ingressFence, point)
	}
	return ""
}

func TestCrashMatrix(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	if testing.Short() {
		t.Skip("crash matrix: not in -short")
	}
	for _, point := range crashtest.Points {
		reached := false
		for _, wl := range workloads {
			reached = reached || len(wl.points[point]) > 0
		}
		if !reached {
			t.Fatalf("crash point %s is in no workload of the matrix", point)
		}
	}
	var mu sync.Mutex
	var results []outcome
	// The cases run in parallel, each in its own world; the table is
	// written once they all ended (a parent's cleanup waits for its
	// parallel subtests).
	t.Cleanup(func() { matrixTable(t, results) })
	for _, wl := range workloads {
		baseline, cleanOps := cleanRun(t, wl)
		for _, point := range crashtest.Points {
			for _, n := range wl.points[point] {
				name := fmt.Sprintf("%s/%s/%d", wl.name, point, n)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					o := crashCase(t, wl, point, n, baseline, cleanOps)
					mu.Lock()
					results = append(results, o)
					mu.Unlock()
					if o.err != "" {
						t.Fatal(o.err)
					}
					if o.lost != 0 {
						t.Fatalf("lost %d rows", o.lost)
					}
				})
			}
		}
	}
}

// matrixTable logs the matrix's outcomes as a table (CRASH_MATRIX_OUT
// also writes it to a file).
func matrixTable(t *testing.T, results []outcome) {
	var b strings.Builder
	fmt.Fprintf(&b, "| point | batches | workload | replayed | lost | restart → first POST |\n|---|---|---|---|---|---|\n")
	for _, o := range results {
		first := "—"
		if o.firstPost >= 0 {
			first = o.firstPost.Round(time.Millisecond).String()
		}
		if o.fenced {
			first += " (fenced: a POST was outstanding)"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %d | %s |\n", o.point, o.batches, o.workload, o.replayed, o.lost, first)
	}
	t.Logf("crash matrix (%d cases):\n%s", len(results), b.String())
	if out := os.Getenv("CRASH_MATRIX_OUT"); out != "" {
		os.WriteFile(out, []byte(b.String()), 0o644)
	}
}

// cleanRun runs the workload without a crash and returns how many lines
// Feldera received: the baseline replays are counted against.
func cleanRun(t *testing.T, wl workload) (int, keyOps) {
	t.Helper()
	w := newSuiteWorld(t, false)
	if !incrementalWorkload(wl) {
		w.mirrorKeyless()
	}
	if wl.setup != nil {
		wl.setup(w)
	}
	before := w.delivered()
	p := w.start(append(append([]string{progressEnv()}, matrixEnv...), wl.env...)...)
	wl.run(w, p, false)
	if msg := w.caughtUp(p, 120*time.Second); msg != "" {
		t.Fatalf("%s clean run: %s\n%s", wl.name, msg, w.log())
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("%s clean run exited %d\n%s", wl.name, code, w.log())
	}
	return w.delivered() - before, w.keyOps()
}

func crashCase(t *testing.T, wl workload, point string, n int, baseline int, clean keyOps) outcome {
	o := outcome{workload: wl.name, point: point, batches: n, firstPost: -1}
	w := newSuiteWorld(t, false)
	if !incrementalWorkload(wl) {
		w.mirrorKeyless()
	}
	if wl.setup != nil {
		wl.setup(w)
	}
	before := w.delivered()
	p := w.start(append(append([]string{fmt.Sprintf("CRASH_AT=%s", point), fmt.Sprintf("CRASH_AFTER_BATCHES=%d", n), progressEnv()}, matrixEnv...), wl.env...)...)
	wl.run(w, p, strings.HasPrefix(point, "snapshot_"))
	if code := p.exited(60 * time.Second); code != 70 {
		p.kill()
		o.err = fmt.Sprintf("the first run exited %d (-1: alive, idle for 60 s), want 70 (crash point reached)\n%s", code, w.log())
		return o
	}
	// Feldera restarts too: what no step took is gone, so only a replay
	// from the slot can bring it back.
	open := w.fel.OpenTransaction()
	restarted := !txnPoints[point] && !wl.keepFeldera
	if restarted {
		w.fel.Restart()
	} else if open == 0 {
		o.err = fmt.Sprintf("the crash at %s left no Feldera transaction open\n%s", point, w.log())
		return o
	}
	run1 := w.fel.Requests()
	restart := time.Now()
	p2 := w.start(append(append([]string{progressEnv()}, matrixEnv...), wl.env...)...)
	if msg := w.caughtUp(p2, 120*time.Second); msg != "" {
		o.lost = w.lost()
		o.err = fmt.Sprintf("after restart: %s\n%s", msg, w.log())
		return o
	}
	if code := p2.stop(t); code != 0 {
		o.err = fmt.Sprintf("the restart exited %d on SIGTERM, want 0\n%s", code, w.log())
	}
	o.lost = w.lost()
	o.replayed = w.delivered() - before - baseline
	o.firstPost = w.firstPostAfter(restart)
	o.fenced = p2.fenced()
	switch {
	case checkFirstPost(point, o.fenced, p2.waitedFence(), o.firstPost) != "":
		o.err = checkFirstPost(point, o.fenced, p2.waitedFence(), o.firstPost) + "\n" + w.log()
	case wl.check != nil && wl.check(p.output()+p2.output()) != "":
		o.err = wl.check(p.output()+p2.output()) + "\n" + w.log()
	case w.maxLines() > maxRequestLines:
		o.err = fmt.Sprintf("a request carried %d lines, more than BATCH_MAX_ROWS=%d", w.maxLines(), batchMaxRows)
	case w.fel.OpenTransaction() != 0:
		o.err = fmt.Sprintf("Feldera transaction %d is still open after the restart caught up (the crashed one: %d)\n%s", w.fel.OpenTransaction(), open, w.log())
	case replayRequired[point] && len(run1) == 0:
		o.err = "the crashed batch was never posted"
	case *suiteProgress && heldPoints[point] && wl.setup == nil && !wl.truncates && !wl.timed && o.replayed != heldResent(run1, restarted):
		o.err = fmt.Sprintf("with the progress table the restart sent %d changes again after a crash at %s, want %d (the crash left %d in an open Feldera transaction; Feldera restarted: %v)\n%s", o.replayed, point, heldResent(run1, restarted), openLines(run1), restarted, w.log())
	case *suiteProgress && point == "before_commit" && wl.setup == nil && !wl.truncates && !wl.timed && o.replayed != 0:
		o.err = fmt.Sprintf("with the progress table the restart sent %d changes again after a crash at before_commit, where the transaction left open was whole (its row posted): committed, it holds them all\n%s", o.replayed, w.log())
	case replayRequired[point] && !wl.truncates && !wl.timed && !*suiteProgress:
		if missing := w.notReplayed(run1[len(run1)-1], clean); len(missing) > 0 {
			o.err = fmt.Sprintf("the restart did not send the unacknowledged batch again: %d of its changes missing (%s …)", len(missing), missing[0])
		}
	}
	return o
}

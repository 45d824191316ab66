package crashtest_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/oracle"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/internal/waitfor"
	"github.com/pgfeldera/pgfeldera/setup"
)

// binary is the real pgfeldera, built once for the package.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pgfeldera-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "pgfeldera")
	out, err := exec.Command("go", "build", "-o", binary, "../cmd/pgfeldera").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build pgfeldera: %v\n%s", err, out)
		os.Exit(1)
	}
	parallelDefault(4)
	pgcluster.Main(m) // exits
}

// parallelDefault runs n tests at once unless -test.parallel says
// otherwise. A crash case spends most of its time waiting (for an
// acknowledgement, a restart, a fence), about a quarter of one core busy:
// at GOMAXPROCS (two here) the matrix's 96 cases took 8 of crashtest's
// 14 minutes in CI.
func parallelDefault(n int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set && runtime.GOMAXPROCS(0) < n {
		flag.Set("test.parallel", strconv.Itoa(n))
	}
}

const pgDDL = `
CREATE TABLE users (id bigint PRIMARY KEY, name text, score int);
CREATE TABLE items (sku int, region text, price numeric(10,2), PRIMARY KEY (sku, region));
CREATE PUBLICATION pub FOR TABLE users, items;`

const felderaDDL = `
CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, score INT);
CREATE TABLE catalog_items (sku INT NOT NULL, region VARCHAR NOT NULL, price DECIMAL(10,2), PRIMARY KEY (sku, region));`

// world is one case: a database, a Feldera double, a state file, a slot.
type world struct {
	t     testing.TB
	pg    *pgcluster.Cluster
	dsn   string
	db    *pgx.Conn
	fel   *felderatest.Server
	dir   string
	slot  string
	logMu sync.Mutex
	logs  bytes.Buffer
	// compared are the (Postgres, Feldera) tables the oracle compares:
	// users and items unless a case maps others.
	compared [][2]string
	// tables is TABLES ("" the harness's), extraEnv what every start of
	// the world adds (mirrorKeyless).
	tables   string
	extraEnv []string
	// inv checks the slot against the progress row while processes run
	// (watchRow); noRowInvariant turns it off where a test makes Feldera
	// go back on purpose.
	inv            *rowInvariant
	noRowInvariant bool
	// declared: the double declares the progress table and the keyless
	// mirror's events (tableDouble).
	declared bool
}

// slotN numbers the slots of one test binary: slots are cluster-wide, and
// parallel tests take numbers at once.
var slotN atomic.Int64

// batchMaxRows is the harness's BATCH_MAX_ROWS. A request may carry one
// line more (maxRequestLines): the batch is sealed after the change that
// reaches the bound, and a key-changing UPDATE is two lines (delete, insert).
const (
	batchMaxRows    = 100
	maxRequestLines = batchMaxRows + 1
)

func newWorld(t testing.TB, mod func(*felderatest.Config)) *world {
	t.Helper()
	return newWorldOn(t, pgcluster.Shared(t), mod)
}

// newWorldOn is newWorld on cluster c.
func newWorldOn(t testing.TB, c *pgcluster.Cluster, mod func(*felderatest.Config)) *world {
	t.Helper()
	w := &world{t: t, pg: c, dir: t.TempDir(), compared: [][2]string{{"users", "users"}, {"items", "catalog_items"}}}
	w.dsn = w.pg.NewDB(t)
	w.slot = fmt.Sprintf("crash_%d_%d", os.Getpid(), slotN.Add(1))
	var err error
	if w.db, err = pgx.Connect(context.Background(), w.dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.db.Close(context.Background()) })
	w.exec(pgDDL)
	cfg := felderatest.Config{Pipeline: "p", Tables: felderatest.MustParseDDL(felderaDDL)}
	if mod != nil {
		mod(&cfg)
	}
	felderatest.Loaded(&cfg) // a pipeline whose steps take time, unless mod set its own
	if w.fel, err = felderatest.NewServer(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.fel.Close)
	return w
}

func (w *world) exec(sql string) {
	w.t.Helper()
	if _, err := w.db.Exec(context.Background(), sql); err != nil {
		w.t.Fatalf("%s: %v", sql, err)
	}
}

// dropSlot drops the slot once its walsender is gone (it exits a moment
// after the client does). It keeps trying while a walsender still holds
// the slot, and gives up on a stall (world.until).
func (w *world) dropSlot() {
	w.t.Helper()
	var err error
	if w.until(time.Minute, 50*time.Millisecond, func() bool {
		_, err = w.db.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", w.slot)
		return err == nil
	}) {
		return
	}
	w.t.Fatalf("drop slot %s: %v", w.slot, err)
}

// proc is a running pgfeldera process.
type proc struct {
	w    *world // whose progress its waits follow
	cmd  *exec.Cmd
	done chan struct{}
	code int
	mu   sync.Mutex
	out  bytes.Buffer
}

// waitedFence reports whether this process held its ingress back behind a
// fence: every such wait is logged (connector/fence.go, openFence).
func (p *proc) waitedFence() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Contains(p.out.Bytes(), []byte("nothing is sent until")) ||
		bytes.Contains(p.out.Bytes(), []byte("fencing ingress as after a crash"))
}

// fenced reports whether this process found that its dead predecessor had
// an ingress request outstanding, and so waited out the fence.
func (p *proc) fenced() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Contains(p.out.Bytes(), []byte("had an ingress request outstanding"))
}

// streaming reports whether this process has started a replication session.
func (p *proc) streaming() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Contains(p.out.Bytes(), []byte("session: streaming"))
}

func (w *world) start(extra ...string) *proc {
	w.t.Helper()
	w.watchRow()
	cmd := exec.Command(binary, "run")
	cmd.Env = append(w.env(), extra...)
	p := w.launch(cmd)
	w.t.Cleanup(func() {
		p.kill()
		if strings.Contains(p.output(), "pgfeldera: metrics server") {
			w.t.Errorf("the metrics server failed (HTTP_ADDR=%s):\n%s", metricsAddr, excerpt(p.output(), 4000))
		}
	})
	return p
}

// launch starts cmd with its output in the world's log.
func (w *world) launch(cmd *exec.Cmd) *proc {
	w.t.Helper()
	p := &proc{w: w, cmd: cmd, done: make(chan struct{})}
	lw := &lockedWriter{w: w, p: p}
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() {
		cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	return p
}

// output is everything the process printed.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// metricsAddr is every test process's HTTP_ADDR: loopback, a port the
// kernel picks, so no two processes collide.
const metricsAddr = "127.0.0.1:0"

// env is the environment of a pgfeldera command for this world.
func (w *world) env() []string {
	tables := w.tables
	if tables == "" {
		tables = "users,public.items:catalog_items"
	}
	env := append(os.Environ(),
		"PG_DSN="+w.dsn, "PG_PUBLICATION=pub", "PG_SLOT="+w.slot,
		"TABLES="+tables,
		"FELDERA_URL="+w.fel.URL, "FELDERA_PIPELINE=p",
		"STATE_FILE="+filepath.Join(w.dir, "state.json"),
		"BATCH_MAX_ROWS="+fmt.Sprint(batchMaxRows), "SNAPSHOT_CHUNK_ROWS="+fmt.Sprint(batchMaxRows), "BATCH_LINGER_MS=0", "LOG_LEVEL=info",
		// The metrics server on a port of its own: an empty HTTP_ADDR is
		// read as unset (its default, :9187), and parallel processes
		// would all try that one port.
		"HTTP_ADDR="+metricsAddr,
		// A short fence: with batches in flight, a crash where a batch
		// completes (after_complete, after_ack) may catch the next
		// batch's POST outstanding, and the restart must then wait the
		// fence out. Where nothing was outstanding it must not wait at
		// all, and the matrix asserts both (see checkFirstPost).
		"FELDERA_INGRESS_FENCE="+ingressFence.String(), "FELDERA_REQUEST_TIMEOUT=3s",
		"FELDERA_COMPLETION_TIMEOUT=20s", "CRASH_AT=", "CRASH_AFTER_BATCHES=1")
	return append(env, w.extraEnv...)
}

type lockedWriter struct {
	w *world
	p *proc
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.p.mu.Lock()
	l.p.out.Write(b)
	l.p.mu.Unlock()
	l.w.logMu.Lock()
	defer l.w.logMu.Unlock()
	return l.w.logs.Write(b)
}

// excerpt is s, or its start and end when it is longer than n bytes.
func excerpt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n/2] + "\n…\n" + s[len(s)-n/2:]
}

func (w *world) log() string {
	w.logMu.Lock()
	defer w.logMu.Unlock()
	s := w.logs.String()
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Kill()
		<-p.done
	}
}

// exited waits for the process to exit and returns its code, or -1 once
// stall passed with no activity (world.activity): a slow machine makes
// the wait longer, while a process that hangs, or lives on idle, still
// ends it.
func (p *proc) exited(stall time.Duration) int {
	if !untilMoving(stall, 10*time.Millisecond, p.w.activity, func() bool { return exitedNow(p) }) {
		return -1
	}
	return p.code
}

// stopStall is how long a stopping process may show no progress: longer
// than any STOP_TIMEOUT a test sets for a stop it waits out (a held batch
// is silent until then).
const stopStall = 3 * time.Minute

// stop sends SIGTERM and waits for a graceful exit, as long as something
// moves (exited).
func (p *proc) stop(t testing.TB) int {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exited(stopStall); code != -1 || exitedNow(p) {
		return p.code
	}
	p.kill()
	t.Fatalf("pgfeldera did not stop after SIGTERM: nothing moved for %s", stopStall)
	return -1
}

// lsn runs q, which returns one LSN as text. A failed query, no row, NULL
// or an unreadable position fails the test: a check that the slot did not
// move must not pass because the position could not be read. Call it from
// the test's goroutine.
func (w *world) lsn(q string) pglogrepl.LSN {
	w.t.Helper()
	var s *string
	if err := w.db.QueryRow(context.Background(), q).Scan(&s); err != nil {
		w.t.Fatalf("%s: %v", q, err)
	}
	if s == nil {
		w.t.Fatalf("%s: NULL", q)
	}
	l, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		w.t.Fatalf("%s: %q: %v", q, *s, err)
	}
	return l
}

// confirmed is the slot's confirmed_flush_lsn: 0 while the slot has no
// position (being created, or not yet created again after a failover or
// a lost slot). A failed query fails the test: a check that the slot did
// not move must not pass because the position could not be read (and one
// whose slot vanished sees 0, not the position it had).
func (w *world) confirmed() pglogrepl.LSN {
	w.t.Helper()
	var s *string
	err := w.db.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", w.slot).Scan(&s)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || (err == nil && s == nil):
		return 0
	case err != nil:
		w.t.Fatalf("reading slot %s: %v", w.slot, err)
	}
	l, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		w.t.Fatalf("slot %s: confirmed_flush_lsn %q: %v", w.slot, *s, err)
	}
	return l
}

// caughtUp waits until the slot confirmed the current WAL position and the
// oracle holds, or the time runs out; it returns the last oracle report.
//
// The time runs out once within passed without progress (see until).
func (w *world) caughtUp(p *proc, within time.Duration) string {
	w.t.Helper()
	target := w.lsn("SELECT pg_current_wal_insert_lsn()::text")
	report := "not caught up"
	exited := false
	w.until(within, 50*time.Millisecond, func() bool {
		if exitedNow(p) {
			exited = true
			return true
		}
		if p.streaming() && w.confirmed() >= target {
			report = w.oracle()
		}
		return report == ""
	})
	if exited {
		return fmt.Sprintf("pgfeldera exited with %d while catching up\n%s", p.code, w.log())
	}
	return report
}

// until waits for cond as long as the system under test makes progress:
// it gives up once within passed with no progress, or at hangCap (or ten
// times within, if more) in all. Progress is anything the processes or
// the double did that a test can see (output, a request, a step, the
// slot's position), so a slow machine makes a test slower, not red, while
// a stall still fails it. It reports whether cond held.
func (w *world) until(within, every time.Duration, cond func() bool) bool {
	return untilMoving(within, every, w.progress, cond)
}

// untilMoving is waitfor.Until with the cap at hangCap: waitfor.Until
// gives up at ten times within even while mark moves, and a wait it gave
// up on that way, with mark seen moving within the window, goes on.
func untilMoving[M comparable](within, every time.Duration, mark func() M, cond func() bool) bool {
	start := time.Now()
	var last M
	moved, seen := start, false
	look := func() M {
		m := mark()
		if !seen || m != last {
			last, moved, seen = m, time.Now(), true
		}
		return m
	}
	for {
		if waitfor.Until(within, every, look, cond) {
			return true
		}
		if time.Since(moved) > within || time.Since(start) > max(hangCap, 10*within) {
			return false
		}
	}
}

// hangCap bounds a wait that keeps seeing progress: far above any run's
// plausible time, a guard against a livelock only (go test -timeout
// covers it too). A wait on a slow machine never meets it; a stall ends
// a wait long before it.
const hangCap = 15 * time.Minute

// progress is a mark of what the processes and the double did so far.
func (w *world) progress() [4]int64 {
	w.logMu.Lock()
	out := int64(w.logs.Len())
	w.logMu.Unlock()
	var lsn *string // NULL or no slot yet: no position
	_ = w.db.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", w.slot).Scan(&lsn)
	var at pglogrepl.LSN
	if lsn != nil {
		at, _ = pglogrepl.ParseLSN(*lsn)
	}
	return [4]int64{out, int64(w.fel.RequestCount()), int64(w.fel.Steps()), int64(at)}
}

// activity is a mark of what the processes printed and the ingress
// requests the double took. Unlike progress it leaves out the slot's
// position (an idle session follows other tests' WAL on the shared
// cluster) and the double's steps, so a process that idles shows none.
func (w *world) activity() [2]int64 {
	w.logMu.Lock()
	out := int64(w.logs.Len())
	w.logMu.Unlock()
	return [2]int64{out, int64(w.fel.RequestCount())}
}

// acked waits until this process streams and the slot confirmed the
// current WAL position, without asking for equality (the unsafe modes).
func (w *world) acked(p *proc, within time.Duration) bool {
	target := w.lsn("SELECT pg_current_wal_insert_lsn()::text")
	ok := false
	w.until(within, 10*time.Millisecond, func() bool {
		ok = !exitedNow(p) && p.streaming() && w.confirmed() >= target
		return ok || exitedNow(p)
	})
	if ok {
		time.Sleep(20 * time.Millisecond) // let the last completion land
	}
	return ok
}

// oracle compares every table, every column; "" when equal.
func (w *world) oracle() string {
	var b strings.Builder
	for _, pair := range w.compared {
		r, err := oracle.Compare(context.Background(), w.db, pair[0], w.fel, pair[1])
		if err != nil {
			return err.Error()
		}
		if !r.Equal() {
			fmt.Fprintf(&b, "%s: %s", pair[0], r.String())
		}
	}
	return b.String()
}

// lost counts the rows the oracle finds missing or different. A
// comparison that fails is a test failure, never a count of 0.
func (w *world) lost() int {
	w.t.Helper()
	n := 0
	for _, pair := range w.compared {
		r, err := oracle.Compare(context.Background(), w.db, pair[0], w.fel, pair[1])
		if err != nil {
			w.t.Fatalf("oracle: compare %s with %s: %v", pair[0], pair[1], err)
		}
		n += len(r.Missing) + len(r.Extra)
	}
	return n
}

// crashDouble is the Feldera a crash case runs against: steps run only
// when the connector waits for them, and Feldera restarts with the
// connector (w.fel.Restart after the crash), losing what no step took
// (exactly_once keeps what completed). So after a crash Feldera holds only
// what completed: a restart that skipped unacknowledged WAL loses rows.
func crashDouble(c *felderatest.Config) {
	c.StepsOnPoll = true
	c.FaultTolerance = "{}"
}

// maxLines is the longest request in the double's log, in lines.
func (w *world) maxLines() int {
	n := 0
	for _, r := range w.fel.Requests() {
		n = max(n, r.Lines)
	}
	return n
}

// firstPostAfter is how long after t the first ingress request came (a
// late-applied request of a dead process does not count), or -1 when none
// did.
func (w *world) firstPostAfter(t time.Time) time.Duration {
	for _, r := range w.fel.Requests() {
		if !r.Time.Before(t) && !r.Late {
			return r.Time.Sub(t)
		}
	}
	return -1
}

// keyOps counts, per table and key, the inserts and deletes the double's
// ingress received: "users/7" → {inserts, deletes}.
type keyOps map[string][2]int

func (w *world) keyOps() keyOps {
	ops := keyOps{}
	for _, r := range w.fel.Requests() {
		for _, k := range r.InsertKeys {
			c := ops[r.Table+"/"+k]
			c[0]++
			ops[r.Table+"/"+k] = c
		}
		for _, k := range r.DeleteKeys {
			c := ops[r.Table+"/"+k]
			c[1]++
			ops[r.Table+"/"+k] = c
		}
	}
	return ops
}

// notReplayed lists the changes of req (the crashed, unacknowledged batch)
// that were not sent again: a change the clean run sent c times must have
// been sent at least c+1 times over the crash and the restart. A later
// upsert of the same key does not count as its replay, because the clean
// run sent that one too.
func (w *world) notReplayed(req felderatest.Request, clean keyOps) []string {
	got := w.keyOps()
	var missing []string
	for i, keys := range [][]string{req.InsertKeys, req.DeleteKeys} {
		for _, k := range keys {
			id := req.Table + "/" + k
			if got[id][i] < clean[id][i]+1 {
				missing = append(missing, fmt.Sprintf("%s %s (sent %d times, the clean run %d)", []string{"insert", "delete"}[i], id, got[id][i], clean[id][i]))
			}
		}
	}
	return missing
}

// delivered is every change Feldera's ingress received, the progress
// row's upserts aside.
func (w *world) delivered() int {
	n := 0
	for _, r := range w.fel.Requests() {
		if r.Table != setup.ProgressTable {
			n += r.Inserts + r.Deletes + r.Updates
		}
	}
	return n
}

// waitState waits until the state file says the snapshot is complete,
// failing the test once within passed without progress (world.until).
func (w *world) waitState(within time.Duration) {
	w.t.Helper()
	if !w.until(within, 20*time.Millisecond, func() bool {
		b, err := os.ReadFile(filepath.Join(w.dir, "state.json"))
		return err == nil && !strings.Contains(string(b), `"pending"`)
	}) {
		w.t.Fatalf("the snapshot did not complete: nothing moved for %s\n%s", within, w.log())
	}
}

// poll waits until cond holds, failing the test after within: a wait for
// a state, never a sleep hoping for it.
func (w *world) poll(what string, within time.Duration, cond func() bool) {
	w.t.Helper()
	if !w.until(within, 10*time.Millisecond, cond) {
		w.t.Fatalf("waited %s without progress for %s\n%s", within, what, w.log())
	}
}

// waitHeld waits until the double holds n requests (a Hang or HangThenApply
// fault fired), instead of sleeping and hoping it did.
func (w *world) waitHeld(n int, within time.Duration) {
	w.t.Helper()
	w.poll(fmt.Sprintf("the double to hold %d requests", n), within, func() bool { return w.fel.Held() >= n })
}

// waitLateApplied waits until n held requests were applied after their
// client left.
func (w *world) waitLateApplied(n int, within time.Duration) {
	w.t.Helper()
	w.poll(fmt.Sprintf("%d late requests applied", n), within, func() bool { return w.fel.LateApplied() >= n })
}

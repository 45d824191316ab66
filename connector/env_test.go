package connector_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/oracle"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/internal/waitfor"
)

var _ connector.Sink = (*feldera.Client)(nil)

func TestMain(m *testing.M) { pgcluster.Main(m) }

// env is one test's world: a fresh database on the shared cluster, a
// Feldera double, and a connector run in-process.
type env struct {
	t      testing.TB
	pg     *pgcluster.Cluster
	dsn    string
	db     *pgx.Conn
	fel    *felderatest.Server
	client *feldera.Client
	slot   string
	logs   *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// news counts the writes that are not debug lines: the periodic
	// debug lines of an idle session (a heartbeat) are not progress.
	news int
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !bytes.Contains(p, []byte("level=DEBUG")) {
		s.news++
	}
	return s.b.Write(p)
}

// News is how many lines above debug were written.
func (s *syncBuffer) News() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.news
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// slotN numbers the slots of one test binary: slots are cluster-wide, and
// parallel tests take numbers at once.
var slotN atomic.Int64

func newEnv(t *testing.T, pgDDL, felderaDDL string) *env {
	t.Helper()
	return newEnvOn(t, pgcluster.Shared(t), pgDDL, felderaDDL, nil)
}

func newEnvOn(t testing.TB, c *pgcluster.Cluster, pgDDL, felderaDDL string, mod func(*felderatest.Config)) *env {
	t.Helper()
	return newEnvGen(t, c, pgDDL, func(string) string { return felderaDDL }, mod)
}

// newEnvGen is newEnvOn with the Feldera program written from the new
// database (by pgfeldera ddl, say) after pgDDL ran.
func newEnvGen(t testing.TB, c *pgcluster.Cluster, pgDDL string, felderaDDL func(dsn string) string, mod func(*felderatest.Config)) *env {
	t.Helper()
	e := &env{t: t, pg: c, dsn: c.NewDB(t), logs: &syncBuffer{}}
	e.slot = fmt.Sprintf("s_%d_%d", os.Getpid(), slotN.Add(1))
	ctx := context.Background()
	var err error
	e.db, err = pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Close(context.Background()) })
	e.exec(pgDDL)
	cfg := felderatest.Config{Pipeline: "p", Tables: felderatest.MustParseDDL(felderaDDL(e.dsn))}
	if mod != nil {
		mod(&cfg)
	}
	felderatest.Loaded(&cfg) // a pipeline whose steps take time, unless mod set its own
	e.fel, err = felderatest.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.fel.Close)
	// The request timeout is generous: a double under -race on a loaded
	// machine answers a 1 MB body in seconds, and a timeout there is not
	// the behaviour under test (tests of timeouts set their own).
	e.client = e.newClient(time.Minute)
	return e
}

// newClient is a client of the test's double with the given request
// timeout.
func (e *env) newClient(timeout time.Duration) *feldera.Client {
	e.t.Helper()
	c, err := feldera.New(feldera.Config{URL: e.fel.URL, Pipeline: "p", RetryWaitMin: 10 * time.Millisecond, RetryWaitMax: 100 * time.Millisecond, RequestTimeout: timeout})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// reconnectDB reopens the test's connection (after a server restart).
func (e *env) reconnectDB() {
	e.t.Helper()
	var err error
	for i := 0; i < 100; i++ {
		if e.db, err = pgx.Connect(context.Background(), e.dsn); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatal(err)
}

// dropSlot drops a slot once its walsender is gone (it exits a moment
// after the client does).
func (e *env) dropSlot(name string) {
	e.t.Helper()
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err = e.db.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", name); err == nil {
			return
		}
	}
	e.t.Fatalf("drop slot %s: %v", name, err)
}

// execOwn runs a statement on its own connection; it is safe from any
// goroutine and reports failure without stopping the calling goroutine.
func (e *env) execOwn(sql string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		e.t.Errorf("%s: %v", sql, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		e.t.Errorf("%s: %v", sql, err)
	}
}

func (e *env) config(tables string) connector.Config {
	e.t.Helper()
	ts, err := catalog.ParseTables(tables)
	if err != nil {
		e.t.Fatal(err)
	}
	return connector.Config{
		DSN: e.dsn, Publication: "pub", Slot: e.slot, Tables: ts,
		AckMode: connector.AckCompleted, RequirePrimaryKey: true,
		CompletionTimeout: 30 * time.Second, BatchMaxRows: 10000, BatchLinger: 20 * time.Millisecond,
		SnapshotMode: connector.SnapshotNever, StateFile: e.t.TempDir() + "/state.json",
		NoProgressTimeout: 2 * time.Minute, BackoffInitial: 50 * time.Millisecond, BackoffMax: time.Second,
		IngressFence: time.Second,
		Logger:       slog.New(slog.NewTextHandler(io.MultiWriter(e.logs, testWriter{e.t}), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

type testWriter struct{ t testing.TB }

// chatty reports whether the tests run with -v, not under -json (which
// sets -test.v=test2json): CI reads the JSON for the failures and the
// times, and the session's debug lines would multiply it many times over.
func chatty() bool {
	f := flag.Lookup("test.v")
	return f != nil && f.Value.String() == "true"
}

func (w testWriter) Write(p []byte) (int, error) {
	if chatty() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// running is a connector run in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func (e *env) start(cfg connector.Config) *running {
	e.t.Helper()
	return e.startWith(cfg, e.client)
}

func (e *env) startWith(cfg connector.Config, sink connector.Sink) *running {
	e.t.Helper()
	return e.run(e.newConnector(cfg, sink))
}

func (e *env) newConnector(cfg connector.Config, sink connector.Sink) *connector.Connector {
	e.t.Helper()
	c, err := connector.New(cfg, sink)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) run(c *connector.Connector) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	e.t.Cleanup(func() { r.stop(e.t) })
	return r
}

// stop stops the connector gracefully and returns Run's error.
func (r *running) stop(t testing.TB) error {
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(90 * time.Second):
		t.Fatal("connector did not stop within 90s")
	}
	return nil
}

func (e *env) currentLSN() pglogrepl.LSN {
	e.t.Helper()
	var s string
	if err := e.db.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	lsn, _ := pglogrepl.ParseLSN(s)
	return lsn
}

// confirmed is the slot's confirmed_flush_lsn. A failed query, a missing
// slot or an unreadable position fails the test: a check that the slot
// did not move must not pass because the position could not be read.
// Call it from the test's goroutine.
func (e *env) confirmed() pglogrepl.LSN {
	e.t.Helper()
	lsn, err := e.slotConfirmed()
	if err != nil {
		e.t.Fatal(err)
	}
	return lsn
}

var errNoSlot = errors.New("the slot does not exist")

// slotConfirmed is confirmed without the failure: 0 while the slot has no
// consistent point, errNoSlot before it exists.
func (e *env) slotConfirmed() (pglogrepl.LSN, error) {
	s, ok, err := e.pg.Slot(context.Background(), e.slot)
	switch {
	case err != nil:
		return 0, fmt.Errorf("reading slot %s: %w", e.slot, err)
	case !ok:
		return 0, fmt.Errorf("slot %s: %w", e.slot, errNoSlot)
	case s.ConfirmedFlushLSN == "":
		return 0, nil
	}
	lsn, err := pglogrepl.ParseLSN(s.ConfirmedFlushLSN)
	if err != nil {
		return 0, fmt.Errorf("slot %s: confirmed_flush_lsn %q: %w", e.slot, s.ConfirmedFlushLSN, err)
	}
	return lsn, nil
}

// waitConfirmed waits until the slot's confirmed_flush_lsn reaches lsn
// (see until for how long).
func (e *env) waitConfirmed(lsn pglogrepl.LSN, within time.Duration) {
	e.t.Helper()
	reached := func() bool {
		got, err := e.slotConfirmed()
		if err != nil && !errors.Is(err, errNoSlot) { // not created yet: wait
			e.t.Fatal(err)
		}
		return err == nil && got >= lsn
	}
	if !e.until(within, 50*time.Millisecond, reached) {
		e.t.Fatalf("confirmed_flush_lsn %s did not reach %s within %s without progress\nlogs:\n%s", e.confirmed(), lsn, within, tail(e.logs.String(), 3000))
	}
}

// waitSlot waits until the slot exists, is streamed from, and has found
// its consistent point: while CREATE_REPLICATION_SLOT waits for the
// transactions running then to end, the slot is listed and active already,
// and a transaction that commits before that point is never decoded.
func (e *env) waitSlot() {
	e.t.Helper()
	if !e.until(30*time.Second, 20*time.Millisecond, func() bool {
		s, ok, _ := e.pg.Slot(context.Background(), e.slot)
		return ok && s.Active && s.ConfirmedFlushLSN != ""
	}) {
		e.t.Fatalf("slot %s never became active\nlogs:\n%s", e.slot, tail(e.logs.String(), 3000))
	}
}

// until waits for cond as long as the system under test makes progress:
// it gives up once within passed with no progress, or at ten times within
// in all. Progress is anything the connector or the double did that a
// test can see (a log line, a request, the slot's position), so a slow
// machine makes a test slower, not red, while a stall still fails it.
func (e *env) until(within, every time.Duration, cond func() bool) bool {
	return waitfor.Until(within, every, e.progress, cond)
}

// progress is a mark of what the connector and the double did so far.
func (e *env) progress() [4]int64 {
	var n, steps int64
	if e.fel != nil {
		n, steps = int64(e.fel.RequestCount()), int64(e.fel.Steps())
	}
	lsn, _ := e.slotConfirmed() // before the slot exists, 0
	return [4]int64{int64(e.logs.News()), n, steps, int64(lsn)}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// diff compares Postgres and Feldera, table by table, every column they
// share; it returns "" when they are equal.
func (e *env) diff(pgTable, felTable string) string {
	e.t.Helper()
	r, err := oracle.Compare(context.Background(), e.db, pgTable, e.fel, felTable)
	if err != nil {
		e.t.Fatal(err)
	}
	if r.Equal() {
		return ""
	}
	return pgTable + " vs " + felTable + ": " + r.String()
}

func (e *env) assertEqual(pgTable, felTable string) {
	e.t.Helper()
	if d := e.diff(pgTable, felTable); d != "" {
		e.t.Fatal(d)
	}
}

// eventuallyEqual waits until the tables match (see until).
func (e *env) eventuallyEqual(pgTable, felTable string, within time.Duration) {
	e.t.Helper()
	d := ""
	if !e.until(within, 50*time.Millisecond, func() bool { d = e.diff(pgTable, felTable); return d == "" }) {
		e.t.Fatalf("not equal after %s without progress:\n%s\nlogs:\n%s", within, d, tail(e.logs.String(), 3000))
	}
}

func (e *env) requestedRows() (inserts, deletes int) {
	for _, r := range e.fel.Requests() {
		inserts += r.Inserts
		deletes += r.Deletes
	}
	return
}

// waitLog waits until the log holds substr (see until).
func (e *env) waitLog(substr string, within time.Duration) {
	e.t.Helper()
	if !e.until(within, 20*time.Millisecond, func() bool { return strings.Contains(e.logs.String(), substr) }) {
		e.t.Fatalf("the log never said %q within %s without progress\n%s", substr, within, tail(e.logs.String(), 3000))
	}
}

// waitHeld waits until the double holds n requests (a Hang or
// HangThenApply fault fired).
func (e *env) waitHeld(n int) {
	e.t.Helper()
	e.poll(fmt.Sprintf("the double to hold %d requests", n), 10*time.Second, func() bool { return e.fel.Held() >= n })
}

// waitLateApplied waits until n held requests were applied after their
// client gave up.
func (e *env) waitLateApplied(n int) {
	e.t.Helper()
	e.poll(fmt.Sprintf("%d late requests applied", n), 10*time.Second, func() bool { return e.fel.LateApplied() >= n })
}

// refusal waits, as long as the connector makes progress (see until),
// for its Run to end with an error, closes r.done, and fails the test
// unless the error names each of wants. It returns the error for any
// further check. what says what should have been refused.
func (e *env) refusal(r *running, what string, within time.Duration, wants ...string) error {
	e.t.Helper()
	var err error
	ended := e.until(within, 10*time.Millisecond, func() bool {
		select {
		case err = <-r.done:
			return true
		default:
			return false
		}
	})
	if !ended {
		e.t.Fatalf("%s was not refused: the connector kept running\n%s", what, tail(e.logs.String(), 3000))
	}
	close(r.done)
	for _, w := range wants {
		if err == nil || !strings.Contains(err.Error(), w) {
			e.t.Fatalf("%s: Run returned %v, want an error naming %q", what, err, w)
		}
	}
	return err
}

// poll waits until cond holds, failing the test once within passed
// without progress (see until).
func (e *env) poll(what string, within time.Duration, cond func() bool) {
	e.t.Helper()
	if !e.until(within, 10*time.Millisecond, cond) {
		e.t.Fatalf("waited %s without progress for %s\n%s", within, what, tail(e.logs.String(), 3000))
	}
}

// assertBatchesBounded fails when an ingress request carried more than max
// lines, plus one: a batch is sealed after the change that reaches the
// bound, and a key-changing UPDATE is two lines.
func (e *env) assertBatchesBounded(max int) {
	e.t.Helper()
	for _, r := range e.fel.Requests() {
		if r.Lines > max+1 {
			e.t.Fatalf("a request to %s carried %d lines, more than BATCH_MAX_ROWS=%d", r.Table, r.Lines, max)
		}
	}
}

// deliver writes rows into table by path ("stream": inserted after the
// connector started; "snapshot": before, and copied), waits until they are
// acknowledged, checks which path carried all of them and that the double
// took every request, and returns what Feldera holds.
func (e *env) deliver(path, table string, want int, insert func()) []felderatest.Row {
	e.t.Helper()
	cfg := e.config(table)
	if path == "snapshot" {
		insert()
		cfg = e.snapshotConfig(table)
	}
	c := e.newConnector(cfg, e.client)
	e.run(c)
	e.waitSlot()
	if path == "stream" {
		insert()
	} else {
		e.waitLog("snapshot: complete", 30*time.Second)
	}
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	if st := c.Stats(); path == "snapshot" && (st.StreamRows.Load() != 0 || st.SnapshotRows.Load() != int64(want)) ||
		path == "stream" && st.StreamRows.Load() != int64(want) {
		e.t.Fatalf("%s: %d rows by the stream, %d by the snapshot", path, st.StreamRows.Load(), st.SnapshotRows.Load())
	}
	for _, r := range e.fel.Requests() {
		if r.Errors != 0 || r.Status != 200 {
			e.t.Fatalf("the double rejected a request: %+v", r)
		}
	}
	rows := e.fel.Rows(table)
	if len(rows) != want {
		e.t.Fatalf("%d rows", len(rows))
	}
	return rows
}

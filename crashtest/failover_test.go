package crashtest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// failoverWorld is a world on a primary of its own with a physical
// standby; dsn lists both, for clients that must find the writable one.
type failoverWorld struct {
	*world
	primary, standby *pgcluster.Cluster
	dbName           string
	multi            string
}

// newFailoverWorld starts a primary (PostgreSQL 17+, else the test is
// skipped) and a standby streaming from it over physical slot standby1;
// with standbySlots, the primary lists it in synchronized_standby_slots.
func newFailoverWorld(t *testing.T, standbySlots bool) *failoverWorld {
	return newFailoverWorldWith(t, standbySlots, nil)
}

// newFailoverWorldWith is newFailoverWorld with mod changing the double.
func newFailoverWorldWith(t *testing.T, standbySlots bool, mod func(*felderatest.Config)) *failoverWorld {
	primary := pgcluster.New(t, pgcluster.Options{})
	if primary.Version < pgcluster.MinFailoverVersion {
		t.Skipf("PostgreSQL %d has no failover slots (%d+ does)", primary.Version, pgcluster.MinFailoverVersion)
	}
	ctx := context.Background()
	standby, err := primary.StartStandby(ctx, "standby1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Stop() })
	if standbySlots {
		if err := primary.Set(ctx, "synchronized_standby_slots", "standby1"); err != nil {
			t.Fatal(err)
		}
	}
	w := newWorldOn(t, primary, mod)
	u, err := url.Parse(w.dsn)
	if err != nil {
		t.Fatal(err)
	}
	f := &failoverWorld{world: w, primary: primary, standby: standby, dbName: strings.TrimPrefix(u.Path, "/")}
	f.multi = pgcluster.MultiHostDSN(f.dbName, primary, standby)
	return f
}

// waitSynced waits until the standby holds a usable copy of the slot.
func (f *failoverWorld) waitSynced(within time.Duration) {
	f.t.Helper()
	ctx := context.Background()
	f.poll("the slot synchronized to the standby", within, func() bool {
		// a running-xacts record lets the slot's catalog xmin move on, which
		// the standby's copy waits for
		f.primary.Exec(ctx, f.dbName, "SELECT pg_log_standby_snapshot()")
		ok, err := f.standby.SyncedSlot(ctx, f.slot)
		return err == nil && ok
	})
}

// failOver kills the primary, promotes the standby and points the
// world's own connection at it.
func (f *failoverWorld) failOver() {
	f.t.Helper()
	f.primary.Kill()
	f.promote()
}

// promote promotes the standby and points the world's own connection at
// it.
func (f *failoverWorld) promote() {
	f.t.Helper()
	ctx := context.Background()
	if err := f.standby.Promote(ctx); err != nil {
		f.t.Fatal(err)
	}
	db, err := pgx.Connect(ctx, f.standby.DSN(f.dbName))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { db.Close(context.Background()) })
	f.world.db = db
}

// failoverWriter writes through the multi-host DSN until stopped,
// reconnecting when the server goes away (the writes of a transaction cut
// by the kill may be lost: the oracle compares with the promoted server).
type failoverWriter struct {
	stop atomic.Bool
	wg   sync.WaitGroup
	ok   atomic.Int64
}

func (f *failoverWorld) startWriter(seed int64, keys int) *failoverWriter {
	wr := &failoverWriter{}
	wr.wg.Add(1)
	f.t.Cleanup(func() { wr.halt() }) // a failed test leaves no writer behind
	go func() {
		defer wr.wg.Done()
		rng := rand.New(rand.NewSource(seed))
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		for n := 1; !wr.stop.Load(); n++ {
			if conn == nil {
				c, err := pgx.Connect(context.Background(), f.multi)
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				conn = c
			}
			id := rng.Intn(keys) + 1
			sql := fmt.Sprintf("INSERT INTO users VALUES (%d, 'w', %d) ON CONFLICT (id) DO UPDATE SET name = 'w2', score = users.score + 1", id, n)
			switch rng.Intn(5) {
			case 0:
				sql = fmt.Sprintf("DELETE FROM users WHERE id = %d", id)
			case 1:
				sql = fmt.Sprintf("INSERT INTO items VALUES (%d, 'w', %d) ON CONFLICT DO NOTHING", 100000+n, n%1000)
			}
			if _, err := conn.Exec(context.Background(), sql); err != nil {
				conn.Close(context.Background())
				conn = nil
				continue
			}
			wr.ok.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return wr
}

func (wr *failoverWriter) halt() int64 {
	wr.stop.Store(true)
	wr.wg.Wait()
	return wr.ok.Load()
}

// Issue 18's acceptance: a primary and a synchronized standby
// (synchronized_standby_slots set), a steady writer, pgfeldera streaming
// through a multi-host DSN. The primary is SIGKILLed mid-load, the standby
// promoted, the writer goes on there. The same pgfeldera process reconnects
// to the promoted server, streams on from its synchronized slot without a
// resnapshot, and Feldera ends exact against the promoted server: nothing
// lost, no phantom row.
func TestFailover_SynchronizedStandby(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	const pre = 20000
	f := newFailoverWorld(t, true)
	f.exec(fmt.Sprintf("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, %d) g", pre))
	f.exec("INSERT INTO items SELECT g, 'eu', g FROM generate_series(1, 100) g")
	p := f.start("PG_DSN="+f.multi, "BATCH_MAX_ROWS=1000", "PG_SLOT_FAILOVER=on")
	if msg := f.caughtUp(p, 2*time.Minute); msg != "" {
		t.Fatal(msg)
	}
	f.waitSynced(90 * time.Second)
	st := exec.Command(binary, "status")
	st.Env = append(f.env(), "PG_DSN="+f.multi)
	so, _ := st.CombinedOutput()
	if !strings.Contains(string(so), fmt.Sprintf("server 127.0.0.1:%d", f.standby.Port)) || !strings.Contains(string(so), "its copy of the slot is synced") ||
		!strings.Contains(string(so), "failover=true") {
		t.Fatalf("status does not show the standby's synced copy of the slot:\n%s", so)
	}
	wr := f.startWriter(18, pre+2000)
	time.Sleep(2 * time.Second)
	killed := time.Now()
	f.failOver()
	time.Sleep(3 * time.Second)
	ops := wr.halt()
	if msg := f.caughtUp(p, 2*time.Minute); msg != "" {
		t.Fatalf("after the failover: %s\n%s", msg, f.log())
	}
	if exitedNow(p) {
		t.Fatalf("pgfeldera exited (%d)", p.code)
	}
	out := p.output()
	for what, n := range map[string]int{"pgfeldera: starting": 1, "snapshot: table copied": 2} {
		if got := strings.Count(out, what); got != n {
			t.Fatalf("%q %d times, want %d (a restart or a resnapshot)\n%s", what, got, n, f.log())
		}
	}
	if strings.Contains(out, "startup: resnapshot") || !strings.Contains(out, "a new timeline forked after everything Feldera was sent") {
		t.Fatalf("the log does not show the failover streamed on without a resnapshot\n%s", f.log())
	}
	if strings.Count(out, "session: streaming") < 2 {
		t.Fatalf("no second session: the reconnect did not happen\n%s", f.log())
	}
	// The double's request log: what was sent after the kill is the
	// writer's changes and a replay, never the table again.
	resent := 0
	for _, r := range f.fel.Requests() {
		if r.Time.After(killed) && r.Table == "users" {
			resent += r.Inserts + r.Deletes
		}
	}
	if resent >= pre {
		t.Fatalf("%d rows sent for users after the failover: a resnapshot", resent)
	}
	t.Logf("%d writes through the failover; %d users rows sent after the kill; exact against the promoted server", ops, resent)
}

// A slot created without failover (PG_SLOT_FAILOVER=off) on PostgreSQL
// 17: status says so, and after a failover the slot is gone, so the
// resnapshot path is taken, and Feldera ends exact.
func TestFailover_SlotWithoutFailoverResnapshots(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	f := newFailoverWorld(t, true)
	f.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 2000) g")
	env := []string{"PG_DSN=" + f.multi, "PG_SLOT_FAILOVER=off"}
	p := f.start(env...)
	if msg := f.caughtUp(p, 2*time.Minute); msg != "" {
		t.Fatal(msg)
	}
	st := exec.Command(binary, "status")
	st.Env = append(f.env(), env...)
	so, _ := st.CombinedOutput()
	if !strings.Contains(string(so), "failover=false") || !strings.Contains(string(so), "lost with the primary") {
		t.Fatalf("status does not say the slot has no failover:\n%s", so)
	}
	wr := f.startWriter(19, 2500)
	time.Sleep(time.Second)
	f.failOver()
	time.Sleep(2 * time.Second)
	wr.halt()
	if msg := f.caughtUp(p, 2*time.Minute); msg != "" {
		t.Fatalf("after the failover: %s\n%s", msg, f.log())
	}
	// Either reason is the failover's: the slot is missing on the promoted
	// server, or (checked first, when the writer's changes reached
	// Feldera past the fork) the timeline forked before what was sent.
	// The CI of stop 31 saw the second on PostgreSQL 17.
	if out := p.output(); !strings.Contains(out, "startup: resnapshot") || !strings.Contains(out, "is missing") && !strings.Contains(out, "a failover: timeline") {
		t.Fatalf("the failover did not take the resnapshot path\n%s", f.log())
	}
}

// Without synchronized_standby_slots the primary sends pgfeldera what the
// standby has not received. The startup says so (the phantom-row
// warning), and the window is real: with the standby's replication paused,
// rows committed on the primary reach Feldera, the primary dies, and the
// promoted standby never had them: Feldera holds phantom rows. The
// reconnecting session sees the new timeline fork before what it sent,
// takes the resnapshot path, and Feldera ends exact.
func TestFailover_PhantomWindowWithoutStandbySlots(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	const phantoms = 50
	f := newFailoverWorld(t, false)
	f.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 2000) g")
	p := f.start("PG_DSN=" + f.multi)
	if msg := f.caughtUp(p, 2*time.Minute); msg != "" {
		t.Fatal(msg)
	}
	if !strings.Contains(p.output(), "PHANTOM-ROW WINDOW") {
		t.Fatalf("no phantom-row warning at startup\n%s", f.log())
	}
	f.waitSynced(90 * time.Second)
	ctx := context.Background()
	f.pauseStandby()
	f.exec(fmt.Sprintf("INSERT INTO users SELECT g, 'phantom', 0 FROM generate_series(900001, %d) g", 900000+phantoms))
	if msg := f.caughtUp(p, time.Minute); msg != "" {
		t.Fatal(msg)
	}
	held := 0
	for _, r := range f.fel.Rows("users") {
		if strings.Contains(fmt.Sprint(r), "phantom") {
			held++
		}
	}
	f.failOver()
	var onPromoted int
	if err := f.db.QueryRow(ctx, "SELECT count(*) FROM users WHERE id > 900000").Scan(&onPromoted); err != nil {
		t.Fatal(err)
	}
	if held != phantoms || onPromoted != 0 {
		t.Fatalf("the window: Feldera held %d of the %d rows, the promoted server %d; want all and none", held, phantoms, onPromoted)
	}
	if msg := f.caughtUp(p, 2*time.Minute); msg != "" {
		t.Fatalf("after the failover: %s\n%s", msg, f.log())
	}
	out := p.output()
	if !strings.Contains(out, "past the fork") || !strings.Contains(out, "startup: resnapshot") {
		t.Fatalf("the session after the failover did not see the fork\n%s", f.log())
	}
	t.Logf("Feldera held %d phantom rows at the failover; the new timeline's fork was seen and the resnapshot removed them", held)
}

// pauseStandby stops the standby's walreceiver (primary_conninfo empty) and
// waits until the primary no longer streams to it.
func (f *failoverWorld) pauseStandby() {
	f.t.Helper()
	ctx := context.Background()
	if err := f.standby.Set(ctx, "primary_conninfo", ""); err != nil {
		f.t.Fatal(err)
	}
	f.poll("the standby to stop streaming", 30*time.Second, func() bool {
		var n int
		// A failed read must fail the test, not read as zero walsenders.
		if err := f.db.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'standby'").Scan(&n); err != nil {
			f.t.Fatalf("reading pg_stat_replication: %v", err)
		}
		return n == 0
	})
}

var forkLog = regexp.MustCompile(`forked from \d+ at ([0-9A-F]+/[0-9A-F]+), and Feldera was sent changes up to ([0-9A-F]+/[0-9A-F]+)`)

// Issue 36, item 5: without synchronized_standby_slots, a large transaction
// whose rows the standby received before it stopped, and whose COMMIT it
// never had. Part of it reaches Feldera: the first batch's ingress request
// is held (the rest of the transaction waits behind it, unread), the
// primary dies, the request times out and Feldera applies it late, while
// pgfeldera's fence waits. The walsender sends a transaction's rows at its
// commit record's start, which is exactly the fork here: a check on the
// positions of the rows read passes (the test asserts the fork is past the
// rows' end and the session never read the COMMIT); only the transaction's
// commit, which ends past the fork, shows that the promoted server never
// committed it. The session after the failover takes the resnapshot path
// and no row of the transaction stays in Feldera.
func TestFailover_PartlySentTransactionPastTheFork(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	const big = 5000
	f := newFailoverWorld(t, false)
	f.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 2000) g")
	p := f.start("PG_DSN="+f.multi, "BATCH_MAX_ROWS=500", "FELDERA_TRANSACTIONS=off")
	if msg := f.caughtUp(p, 2*time.Minute); msg != "" {
		t.Fatal(msg)
	}
	f.waitSynced(90 * time.Second)
	ctx := context.Background()
	tx, err := pgx.Connect(ctx, f.primary.DSN(f.dbName))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close(ctx)
	var rowsEnd string
	if _, err := tx.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO users SELECT g, 'inflight', 0 FROM generate_series(900001, %d) g", 900000+big)); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&rowsEnd); err != nil {
		t.Fatal(err)
	}
	f.poll("the standby to receive the transaction's rows", 30*time.Second, func() bool {
		// No row (the standby not connected yet) or NULL (no flush
		// reported yet) is "not yet"; any other failure fails the test.
		var ok *bool
		err := f.db.QueryRow(ctx, "SELECT flush_lsn >= $1::pg_lsn FROM pg_stat_replication WHERE application_name = 'standby'", rowsEnd).Scan(&ok)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			f.t.Fatalf("reading the standby's flush position: %v", err)
		}
		return err == nil && ok != nil && *ok
	})
	f.pauseStandby()
	f.fel.InjectFault(felderatest.Fault{Kind: felderatest.HangThenApply, Path: "ingress"})
	if _, err := tx.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	f.poll("Feldera to hold a request of the transaction", time.Minute, func() bool { return f.fel.Held() > 0 })
	f.primary.Kill()
	f.poll("the session to end on the held request", time.Minute, func() bool { return strings.Contains(p.output(), "session: ended") })
	// The server sees the client gone a moment after the session ended:
	// released before, the request would be an ordinary one, not late.
	f.poll("the double to see the held request's client gone", 30*time.Second, func() bool { return f.fel.HeldAbandoned() > 0 })
	f.fel.ClearFaults() // the held request applies late: part of the transaction is in Feldera
	inflight := func() int {
		n := 0
		for _, r := range f.fel.Rows("users") {
			if strings.Contains(fmt.Sprint(r), "inflight") {
				n++
			}
		}
		return n
	}
	f.poll("the held request's rows to land in Feldera", time.Minute, func() bool { return f.fel.LateApplied() > 0 })
	held := inflight()
	if held == 0 || held >= big {
		t.Fatalf("Feldera holds %d of the transaction's %d rows at the failover; want a part", held, big)
	}
	if n := f.fel.LateApplied(); n != 1 {
		t.Fatalf("%d requests applied after their client gave up; want the one held", n)
	}
	f.promote()
	var onPromoted int
	if err := f.db.QueryRow(ctx, "SELECT count(*) FROM users WHERE id > 900000").Scan(&onPromoted); err != nil || onPromoted != 0 {
		t.Fatalf("the promoted server holds %d rows of the transaction (%v); want none", onPromoted, err)
	}
	if msg := f.caughtUp(p, 2*time.Minute); msg != "" {
		t.Fatalf("after the failover: %s\n%s", msg, f.log())
	}
	out := p.output()
	m := forkLog.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "startup: resnapshot") {
		t.Fatalf("the session after the failover did not see the fork\n%s", f.log())
	}
	fork, err := pglogrepl.ParseLSN(m[1])
	if err != nil {
		t.Fatalf("the fork position %q in the log: %v", m[1], err)
	}
	end, err := pglogrepl.ParseLSN(rowsEnd)
	if err != nil {
		t.Fatalf("the rows' end %q: %v", rowsEnd, err)
	}
	if fork < end {
		t.Fatalf("the fork %s lies before the transaction's rows end (%s): the case is not the one meant", fork, end)
	}
	if n := inflight(); n != 0 {
		t.Fatalf("%d rows of a transaction the promoted server never committed stay in Feldera", n)
	}
	t.Logf("Feldera held %d of %d rows of the transaction; every row before the fork (%s ≥ %s), its commit past it (sent up to %s); resnapshot removed them", held, big, fork, end, m[2])
}

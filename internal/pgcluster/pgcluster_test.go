package pgcluster_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func TestCluster_RunsUnprivileged(t *testing.T) {
	pgcluster.EveryVersion(t)
	c := pgcluster.Shared(t)
	pid := c.Pid()
	st, err := os.Stat("/proc/" + strconv.Itoa(pid))
	if err != nil {
		t.Fatalf("postmaster %d: %v", pid, err)
	}
	uid := st.Sys().(*syscall.Stat_t).Uid
	if os.Geteuid() == 0 && uid == 0 {
		t.Fatalf("postmaster runs as root")
	}
	conn, err := pgx.Connect(ctx(t), c.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx(t))
	var wl string
	if err := conn.QueryRow(ctx(t), "SHOW wal_level").Scan(&wl); err != nil || wl != "logical" {
		t.Fatalf("wal_level = %q, %v; want logical", wl, err)
	}
}

func TestCluster_SlotCreateAndConsume(t *testing.T) {
	pgcluster.EveryVersion(t)
	c := pgcluster.Shared(t)
	dsn := c.NewDB(t)
	conn, err := pgx.Connect(ctx(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx(t))
	for _, q := range []string{
		"CREATE TABLE t (id int primary key)",
		"SELECT pg_create_logical_replication_slot('harness_slot', 'test_decoding')",
		"INSERT INTO t VALUES (1), (2)",
	} {
		if _, err := conn.Exec(ctx(t), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var n int
	if err := conn.QueryRow(ctx(t), `SELECT count(*) FROM pg_logical_slot_get_changes('harness_slot', NULL, NULL) WHERE data LIKE 'table public.t: INSERT%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("consumed %d inserts, want 2", n)
	}
	s, ok, err := c.Slot(ctx(t), "harness_slot")
	if err != nil || !ok {
		t.Fatalf("slot: ok=%v err=%v", ok, err)
	}
	if s.ConfirmedFlushLSN == "" || s.Plugin != "test_decoding" {
		t.Fatalf("slot = %+v", s)
	}
}

func TestCluster_Restart(t *testing.T) {
	pgcluster.EveryVersion(t)
	c := pgcluster.New(t, pgcluster.Options{})
	dsn := c.NewDB(t)
	if err := c.Exec(ctx(t), "postgres", "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	for _, immediate := range []bool{false, true} {
		before := c.Pid()
		if err := c.Restart(immediate); err != nil {
			t.Fatalf("restart(immediate=%v): %v", immediate, err)
		}
		if c.Pid() == before {
			t.Fatalf("pid unchanged after restart")
		}
		conn, err := pgx.Connect(ctx(t), dsn)
		if err != nil {
			t.Fatalf("connect after restart: %v", err)
		}
		conn.Close(ctx(t))
	}
	if err := c.Set(ctx(t), "wal_sender_timeout", "4s"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx(t))
	var v string
	if err := conn.QueryRow(ctx(t), "SHOW wal_sender_timeout").Scan(&v); err != nil || v != "4s" {
		t.Fatalf("wal_sender_timeout = %q, %v", v, err)
	}
}

// TestCluster_NoLeftoverAfterPanic runs a child test binary that starts a
// cluster and panics, then checks the postmaster it printed is gone.
func TestCluster_NoLeftoverAfterPanic(t *testing.T) {
	pgcluster.EveryVersion(t)
	if os.Getenv("PGCLUSTER_CHILD") == "1" {
		c, err := pgcluster.Start(pgcluster.Options{})
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("PID=" + strconv.Itoa(c.Pid()) + "\nDIR=" + c.Dir + "\n")
		panic("child panics with a running cluster")
	}
	pgcluster.Shared(t) // skip or fail exactly like the other tests when no binaries
	cmd := exec.Command(os.Args[0], "-test.run=^TestCluster_NoLeftoverAfterPanic$")
	cmd.Env = append(os.Environ(), "PGCLUSTER_CHILD=1")
	out, _ := cmd.CombinedOutput()
	var pid int
	var dir string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "PID=") {
			pid, _ = strconv.Atoi(strings.TrimPrefix(line, "PID="))
		}
		if d, ok := strings.CutPrefix(line, "DIR="); ok {
			dir = d
		}
	}
	if pid == 0 || dir == "" {
		t.Fatalf("child printed no pid or directory:\n%s", out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("postmaster %d still alive after the test binary exited", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The directory outlives the panic; the next Start (here, Sweep)
	// removes it, its owner being gone, and keeps this process's own.
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the child's cluster directory %s: %v (the test cannot see a leftover)", dir, err)
	}
	pgcluster.Sweep()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the directory %s of a cluster whose test process died is still there (%v)", dir, err)
	}
	if _, err := os.Stat(pgcluster.Shared(t).Dir); err != nil {
		t.Fatalf("Sweep removed a live process's cluster: %v", err)
	}
}

// In CI a missing server is a failure, never a skip: CI counts as set for
// anything but a false value.
func TestInCI(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "false": false, "FALSE": false, "no": false, "off": false,
		"true": true, "1": true, "yes": true, "TRUE": true, "github": true, "woodpecker": true} {
		t.Setenv("CI", v)
		if got := pgcluster.InCI(); got != want {
			t.Errorf("CI=%q: InCI() = %v, want %v", v, got, want)
		}
	}
}

// A standby copied without client tools streams from the primary, holds
// a synchronized copy of a failover slot, and after the primary is killed
// and the standby promoted, the slot is there and the new primary takes
// writes; a multi-host DSN with target_session_attrs=read-write finds it.
func TestStandby_FailoverSlotSurvivesPromotion(t *testing.T) {
	pgcluster.EveryVersion(t)
	p := pgcluster.New(t, pgcluster.Options{})
	if p.Version < pgcluster.MinFailoverVersion {
		t.Skipf("PostgreSQL %d: failover slots need %d+", p.Version, pgcluster.MinFailoverVersion)
	}
	if err := p.Exec(ctx(t), "postgres", "CREATE TABLE t (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	s, err := p.StartStandby(ctx(t), "standby1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if err := p.Set(ctx(t), "synchronized_standby_slots", "standby1"); err != nil {
		t.Fatal(err)
	}
	if err := p.Exec(ctx(t), "postgres", "SELECT pg_create_logical_replication_slot('fs', 'pgoutput', false, false, true)"); err != nil {
		t.Fatal(err)
	}
	if err := p.Exec(ctx(t), "postgres", "INSERT INTO t SELECT generate_series(1, 100)"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ok, err := s.SyncedSlot(ctx(t), "fs")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failover slot was not synchronized to the standby; standby log:\n%s", s.Log())
		}
		// A synced copy becomes usable once the primary's slot moved past
		// what the standby can provide: a consumer advances it.
		// (a running-xacts record lets decoding move its catalog xmin on).
		p.Exec(ctx(t), "postgres", "SELECT pg_log_standby_snapshot()")
		p.Exec(ctx(t), "postgres", "SELECT pg_replication_slot_advance('fs', pg_current_wal_lsn())")
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the failover slot was synchronized after %s", time.Since(start).Round(time.Millisecond))
	if os.Getenv("PGCLUSTER_SHOW_LOG") != "" {
		t.Log(s.Log())
	}
	if err := s.WaitReplayed(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	dsn := pgcluster.MultiHostDSN("postgres", p, s)
	p.Kill()
	if err := s.Promote(ctx(t)); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx(t), dsn)
	if err != nil {
		t.Fatalf("multi-host DSN after the failover: %v", err)
	}
	defer conn.Close(ctx(t))
	var n int
	if err := conn.QueryRow(ctx(t), "INSERT INTO t VALUES (101) RETURNING (SELECT count(*) FROM t)").Scan(&n); err != nil || n != 100 {
		t.Fatalf("write on the promoted standby: %d, %v", n, err)
	}
	var failover bool
	if err := conn.QueryRow(ctx(t), "SELECT failover FROM pg_replication_slots WHERE slot_name = 'fs'").Scan(&failover); err != nil || !failover {
		t.Fatalf("the slot on the promoted standby: failover %v, %v", failover, err)
	}
}

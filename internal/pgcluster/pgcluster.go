// Package pgcluster starts private, throwaway PostgreSQL clusters, for the
// tests and for `pgfeldera demo`.
//
// A Cluster is initdb'd into a temporary directory, listens on a free
// loopback port with its socket in that directory, and runs with
// wal_level=logical so logical replication can be tested for real. When the
// tests run as root, initdb and postgres run as an unprivileged OS user
// (PGCLUSTER_OS_USER, else "postgres", else a "pgfeldera" user created on the
// spot), because postgres refuses to run as root.
//
// The server binaries come from PG_BIN, else the newest
// /usr/lib/postgresql/*/bin. Without them, Require skips the test with a
// clear reason, except in CI (CI=true), where a missing server is a failure.
//
// The harness stops only the postmaster it started, by pid. The postmaster is
// started with a parent-death signal, so it dies with the test binary even
// when a test panics or the binary is killed.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is one running PostgreSQL server owned by the test process.
type Cluster struct {
	BinDir  string // directory with initdb and postgres
	Dir     string // root temp dir: data/ and the socket live here
	DataDir string
	Port    int
	Version int // server major version

	cred *syscall.Credential // nil when not running as root
	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd exits
	logf *os.File
	dbN  atomic.Int64

	adminMu sync.Mutex
	admin   []*pgx.Conn // idle connections to database postgres (onAdmin)
}

// Options tune a new cluster. Zero values mean the defaults.
type Options struct {
	// Settings are extra postgresql.conf lines, key = value.
	Settings map[string]string
}

// ErrNoBinaries is returned when no PostgreSQL server binaries are found.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found: set PG_BIN to a directory with initdb and postgres, or install them (Debian: apt-get install -y postgresql)")

// FindBinDir returns the directory holding initdb and postgres: PG_BIN,
// else the newest /usr/lib/postgresql/<major>/bin.
func FindBinDir() (string, error) {
	if d := os.Getenv("PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err != nil {
			return "", fmt.Errorf("PG_BIN=%s: %w", d, err)
		}
		return d, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(matches) == 0 {
		return "", ErrNoBinaries
	}
	sort.Slice(matches, func(i, j int) bool {
		return majorOf(matches[i]) > majorOf(matches[j])
	})
	return filepath.Dir(matches[0]), nil
}

// Tool finds a PostgreSQL client program (pgbench, psql): in PG_BIN, then
// the newest /usr/lib/postgresql/<major>/bin, then PATH. Any version works
// against any server here. Missing, it fails the test in CI and skips it
// elsewhere.
func Tool(tb testing.TB, name string) string {
	tb.Helper()
	var dirs []string
	if d := os.Getenv("PG_BIN"); d != "" {
		dirs = append(dirs, d)
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	sort.Slice(matches, func(i, j int) bool { return majorOf(matches[i]) > majorOf(matches[j]) })
	for _, m := range matches {
		dirs = append(dirs, filepath.Dir(m))
	}
	for _, d := range dirs {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	err := fmt.Errorf("%s not found in PG_BIN, /usr/lib/postgresql/*/bin or PATH (Debian: apt-get install -y postgresql-client)", name)
	if InCI() {
		tb.Fatal(err)
	}
	tb.Skip(err)
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

func majorOf(path string) int {
	for _, part := range strings.Split(path, "/") {
		if n, err := strconv.Atoi(part); err == nil {
			return n
		}
	}
	return 0
}

// InCI reports whether the tests run in CI, where missing binaries fail:
// CI set to anything but a false value ("", "0", "false", "no", "off").
func InCI() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("CI"))) {
	case "", "0", "false", "no", "off":
		return false
	}
	return true
}

var (
	shared     *Cluster
	sharedErr  error
	sharedOnce sync.Once
)

// Shared returns the package's shared cluster, starting it on first use.
// Call Main from TestMain so that it is stopped when the tests finish.
func Shared(tb testing.TB) *Cluster {
	tb.Helper()
	checkDeclared(tb)
	sharedOnce.Do(func() {
		shared, sharedErr = Start(Options{})
	})
	if sharedErr != nil {
		fail(tb, sharedErr)
	}
	return shared
}

// Main runs the tests and stops the shared cluster, if one was started.
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgcluster: stop:", err)
		}
	}
	os.Exit(code)
}

// New starts a cluster for one test and stops it when the test ends.
func New(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	checkDeclared(tb)
	c, err := Start(opts)
	if err != nil {
		fail(tb, err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Errorf("pgcluster: stop: %v", err)
		}
	})
	return c
}

func fail(tb testing.TB, err error) {
	tb.Helper()
	if errors.Is(err, ErrNoBinaries) && !InCI() {
		tb.Skipf("pgcluster: %v", err)
	}
	tb.Fatalf("pgcluster: %v", err)
}

// Start initdb's and starts a new cluster. The caller must Stop it.
func Start(opts Options) (*Cluster, error) {
	bin, err := FindBinDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{BinDir: bin}
	c.Version = majorOf(bin)
	if os.Geteuid() == 0 {
		cred, err := osUser()
		if err != nil {
			return nil, err
		}
		c.cred = cred
	}
	Sweep()
	dir, err := os.MkdirTemp("", "pgcluster-")
	if err != nil {
		return nil, err
	}
	if err := markOwner(dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.Dir = dir
	c.DataDir = filepath.Join(dir, "data")
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, err
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", c.DataDir, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	settings := map[string]string{
		"wal_level":               "logical",
		"max_replication_slots":   "40",
		"max_wal_senders":         "40",
		"fsync":                   "off",
		"full_page_writes":        "off",
		"listen_addresses":        "'127.0.0.1'",
		"unix_socket_directories": "'" + dir + "'",
		"max_connections":         "200",
		"shared_buffers":          "64MB",
		"logging_collector":       "off",
		"log_min_messages":        "warning",
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	if err := c.appendConf(settings); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := c.start(); err != nil {
		c.kill()
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// osUser returns the credentials of the unprivileged user to run postgres as.
func osUser() (*syscall.Credential, error) {
	names := []string{"postgres", "pgfeldera"}
	if n := os.Getenv("PGCLUSTER_OS_USER"); n != "" {
		names = []string{n}
	}
	for _, name := range names {
		if u, err := user.Lookup(name); err == nil {
			return credOf(u)
		}
	}
	name := names[len(names)-1]
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("create OS user %q for postgres (it refuses to run as root): %w: %s", name, err, out)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	return credOf(u)
}

func credOf(u *user.User) (*syscall.Credential, error) {
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func (c *Cluster) appendConf(settings map[string]string) error {
	f, err := os.OpenFile(filepath.Join(c.DataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, err := fmt.Fprintf(f, "%s = %s\n", k, settings[k]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if c.Port == 0 || attempt > 0 {
			p, err := freePort()
			if err != nil {
				return err
			}
			c.Port = p
		}
		if err := c.spawn(); err != nil {
			return err
		}
		lastErr = c.waitReady(30 * time.Second)
		if lastErr == nil {
			return nil
		}
		c.killLocked()
	}
	return lastErr
}

func (c *Cluster) spawn() error {
	logf, err := os.OpenFile(filepath.Join(c.Dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(c.BinDir, "postgres"), "-D", c.DataDir, "-p", strconv.Itoa(c.Port))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	exit := make(chan struct{})
	go func() { cmd.Wait(); close(exit) }()
	c.cmd, c.exit, c.logf = cmd, exit, logf
	return nil
}

func (c *Cluster) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-c.exit:
			return fmt.Errorf("postgres exited during start-up; log:\n%s", c.Log())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, c.DSN("postgres"))
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("postgres not ready after %s; log:\n%s", timeout, c.Log())
}

// Log returns the server log so far.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "postgres.log"))
	return string(b)
}

// Pid returns the postmaster's pid, 0 when it is not running.
func (c *Cluster) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// DSN returns a URL for database db as the superuser postgres over TCP.
func (c *Cluster) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// shutdown signals the postmaster and waits for it to exit.
// SIGINT is a fast shutdown, SIGQUIT an immediate one.
func (c *Cluster) shutdown(sig syscall.Signal, timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return nil
	}
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.exit:
	case <-time.After(timeout):
		c.killLocked()
		return fmt.Errorf("postgres did not stop within %s after %v; killed", timeout, sig)
	}
	c.cmd = nil
	c.logf.Close()
	c.closeAdmin()
	return nil
}

func (c *Cluster) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.killLocked()
}

func (c *Cluster) killLocked() {
	if c.cmd == nil {
		return
	}
	// The postmaster runs in its own process group: kill it and its backends.
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	<-c.exit
	c.cmd = nil
	c.logf.Close()
	c.closeAdmin()
}

// Restart stops the server (fast shutdown, or immediate when immediate is
// true: a crash as far as the WAL is concerned) and starts it on the same port.
func (c *Cluster) Restart(immediate bool) error {
	sig := syscall.SIGINT
	if immediate {
		sig = syscall.SIGQUIT
	}
	if err := c.shutdown(sig, 60*time.Second); err != nil {
		return err
	}
	return c.respawn()
}

// respawn starts the stopped server again on its port.
func (c *Cluster) respawn() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.spawn(); err != nil {
		return err
	}
	if err := c.waitReady(60 * time.Second); err != nil {
		c.killLocked()
		return err
	}
	return nil
}

// Stop shuts the server down (fast) and removes its directory.
func (c *Cluster) Stop() error {
	err := c.shutdown(syscall.SIGINT, 30*time.Second)
	if rmErr := os.RemoveAll(c.Dir); err == nil {
		err = rmErr
	}
	return err
}

// Exec runs statements in database db as the superuser.
func (c *Cluster) Exec(ctx context.Context, db string, sql string, args ...any) error {
	if db == "postgres" {
		return c.onAdmin(ctx, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, sql, args...)
			return err
		})
	}
	conn, err := pgx.Connect(ctx, c.DSN(db))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// onAdmin runs fn on an idle connection to database postgres, or a new
// one, and keeps it for the next call. Tests poll the slot every few
// milliseconds: a connection per poll was a backend forked, initialised
// and ended each time, thousands per package and the largest part of the
// servers' CPU time in CI. An idle connection is pinged before use, so
// one left from before a Restart is replaced rather than failing the
// caller.
func (c *Cluster) onAdmin(ctx context.Context, fn func(*pgx.Conn) error) error {
	conn, err := c.adminConn(ctx)
	if err != nil {
		return err
	}
	err = fn(conn)
	c.adminMu.Lock()
	// Only a connection outside any transaction is kept ('I': idle).
	if !conn.IsClosed() && conn.PgConn().TxStatus() == 'I' && len(c.admin) < 4 {
		c.admin = append(c.admin, conn)
		conn = nil
	}
	c.adminMu.Unlock()
	if conn != nil {
		conn.Close(context.Background())
	}
	return err
}

func (c *Cluster) adminConn(ctx context.Context) (*pgx.Conn, error) {
	for {
		c.adminMu.Lock()
		n := len(c.admin)
		if n == 0 {
			c.adminMu.Unlock()
			return pgx.Connect(ctx, c.DSN("postgres"))
		}
		conn := c.admin[n-1]
		c.admin = c.admin[:n-1]
		c.adminMu.Unlock()
		if conn.Ping(ctx) == nil {
			return conn, nil
		}
		conn.Close(context.Background())
	}
}

// closeAdmin closes the idle connections of onAdmin once the server has
// stopped.
func (c *Cluster) closeAdmin() {
	c.adminMu.Lock()
	idle := c.admin
	c.admin = nil
	c.adminMu.Unlock()
	for _, conn := range idle {
		conn.Close(context.Background())
	}
}

// Set changes a server setting with ALTER SYSTEM and reloads the configuration.
func (c *Cluster) Set(ctx context.Context, name, value string) error {
	if err := c.Exec(ctx, "postgres", fmt.Sprintf("ALTER SYSTEM SET %s = %s", pgx.Identifier{name}.Sanitize(), quoteLiteral(value))); err != nil {
		return err
	}
	return c.Exec(ctx, "postgres", "SELECT pg_reload_conf()")
}

// Slot is a row of pg_replication_slots.
type Slot struct {
	Name              string
	Plugin            string
	Database          string
	Active            bool
	ActivePid         int
	RestartLSN        string
	ConfirmedFlushLSN string
	WalStatus         string
}

// Slot reads the named slot; ok is false when it does not exist.
func (c *Cluster) Slot(ctx context.Context, name string) (s Slot, ok bool, err error) {
	var pid *int32
	var plugin, db, restart, confirmed, walStatus *string
	err = c.onAdmin(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT slot_name, plugin, database, active, active_pid,
			restart_lsn::text, confirmed_flush_lsn::text, wal_status
			FROM pg_replication_slots WHERE slot_name = $1`, name).
			Scan(&s.Name, &plugin, &db, &s.Active, &pid, &restart, &confirmed, &walStatus)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	if err != nil {
		return s, false, err
	}
	if pid != nil {
		s.ActivePid = int(*pid)
	}
	s.Plugin, s.Database, s.RestartLSN, s.ConfirmedFlushLSN, s.WalStatus = deref(plugin), deref(db), deref(restart), deref(confirmed), deref(walStatus)
	return s, true, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// NewDB creates a fresh database for one test and returns its DSN. When the
// test ends, its replication slots and the database are dropped.
func (c *Cluster) NewDB(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), c.dbN.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Exec(ctx, "postgres", "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgcluster: create database: %v", err)
	}
	tb.Cleanup(func() {
		if c.Pid() == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Exec(ctx, "postgres", `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name)
		for i := 0; i < 50; i++ {
			if err := c.Exec(ctx, "postgres", `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := c.Exec(ctx, "postgres", "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Logf("pgcluster: drop database %s: %v", name, err)
		}
	})
	return c.DSN(name)
}

// LoseSlotSettings make a slot losable: a cluster started with them keeps
// at most 1 MB of WAL for a slot, so LoseSlot can get past it quickly.
var LoseSlotSettings = map[string]string{"max_slot_wal_keep_size": "1MB", "max_wal_size": "32MB", "min_wal_size": "32MB"}

// LoseSlot writes and switches WAL in db and checkpoints until the slot's
// wal_status is "lost" (its WAL removed), within a minute. The cluster
// must run with LoseSlotSettings and the slot must not be in use.
func (c *Cluster) LoseSlot(ctx context.Context, db, slot string) error {
	if err := c.Exec(ctx, db, "CREATE TABLE IF NOT EXISTS pgcluster_wal_filler (payload text)"); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		for i := 0; i < 4; i++ {
			if err := c.Exec(ctx, db, "INSERT INTO pgcluster_wal_filler SELECT repeat('x', 1000) FROM generate_series(1, 2000)"); err != nil {
				return err
			}
			if err := c.Exec(ctx, db, "SELECT pg_switch_wal()"); err != nil {
				return err
			}
		}
		if err := c.Exec(ctx, db, "CHECKPOINT"); err != nil {
			return err
		}
		s, ok, err := c.Slot(ctx, slot)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("slot %s does not exist", slot)
		}
		if s.WalStatus == "lost" {
			return nil
		}
	}
	return fmt.Errorf("slot %s is not lost after a minute of WAL (is the cluster started with LoseSlotSettings?)", slot)
}

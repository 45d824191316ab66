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
	"path/filepath"
	"sort"
	"strconv"
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
	if err := c.makeDir(); err != nil {
		return nil, err
	}
	if err := c.initdb(); err != nil {
		return nil, err
	}
	dir := c.Dir
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

// makeDir creates the cluster's temporary directory, marked as this
// process's for Sweep and open to the OS user the server runs as.
func (c *Cluster) makeDir() error {
	dir, err := os.MkdirTemp("", "pgcluster-")
	if err != nil {
		return err
	}
	if err := markOwner(dir); err != nil {
		os.RemoveAll(dir)
		return err
	}
	c.Dir = dir
	c.DataDir = filepath.Join(dir, "data")
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return err
		}
	}
	return nil
}

// initdb creates the data directory as the server's OS user, with trust
// auth and --no-sync, since the cluster is thrown away.
func (c *Cluster) initdb() error {
	initdb := exec.Command(filepath.Join(c.BinDir, "initdb"), "-D", c.DataDir, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	initdb.Dir = c.Dir
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(c.Dir)
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
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

package pgcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Physical standbys, for failover tests (PostgreSQL 17+: failover slots).
//
// StartStandby makes a base copy of the primary without client tools (the
// npm server builds ship none): the primary is stopped cleanly, its data
// directory copied, and started again. The copy starts as a hot standby
// streaming from the primary over a physical slot, with
// hot_standby_feedback and, on 17+, sync_replication_slots, so the
// primary's failover slots are synchronized to it; primary_conninfo
// names a database, which the slot sync worker needs.

// MinFailoverVersion is the first major version with failover slots.
const MinFailoverVersion = 17

// StartStandby copies the primary c into a standby that streams from it
// over the physical slot slot (created here). The caller must Stop it.
func (c *Cluster) StartStandby(ctx context.Context, slot string) (*Cluster, error) {
	if err := c.Exec(ctx, "postgres", "SELECT pg_create_physical_replication_slot($1, true)", slot); err != nil {
		return nil, fmt.Errorf("create physical slot %s: %w", slot, err)
	}
	if err := c.shutdown(syscall.SIGINT, 60*time.Second); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgcluster-standby-")
	if err != nil {
		return nil, err
	}
	s := &Cluster{BinDir: c.BinDir, Dir: dir, DataDir: filepath.Join(dir, "data"), Version: c.Version, cred: c.cred}
	fail := func(err error) (*Cluster, error) {
		s.kill()
		os.RemoveAll(dir)
		return nil, err
	}
	// cp -a keeps the owner (postgres runs unprivileged when the tests run
	// as root) and the 0700 mode of the data directory.
	if out, err := exec.Command("cp", "-a", c.DataDir, s.DataDir).CombinedOutput(); err != nil {
		c.respawn()
		return fail(fmt.Errorf("copy the data directory: %w: %s", err, out))
	}
	if err := c.respawn(); err != nil {
		return fail(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(err)
	}
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fail(err)
		}
	}
	if err := s.makeStandbyData(); err != nil {
		return fail(err)
	}
	if err := s.appendConf(c.standbySettings(dir, slot)); err != nil {
		return fail(err)
	}
	if err := s.start(); err != nil {
		return fail(err)
	}
	return s, nil
}

// makeStandbyData turns a copied data directory into a standby's: no
// postmaster files, no replication slots, and a standby.signal.
func (c *Cluster) makeStandbyData() error {
	for _, f := range []string{"postmaster.pid", "postmaster.opts"} {
		os.Remove(filepath.Join(c.DataDir, f))
	}
	// A base copy holds no replication slots (a slot copied with the files
	// would be a stale, unsynchronized slot on the standby).
	if entries, err := os.ReadDir(filepath.Join(c.DataDir, "pg_replslot")); err == nil {
		for _, e := range entries {
			os.RemoveAll(filepath.Join(c.DataDir, "pg_replslot", e.Name()))
		}
	}
	signal := filepath.Join(c.DataDir, "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		return err
	}
	if c.cred != nil {
		os.Chown(signal, int(c.cred.Uid), int(c.cred.Gid))
	}
	return nil
}

// standbySettings are the standby's postgresql.conf lines: its own socket
// directory, and streaming from the primary c over slot, synchronizing the
// primary's failover slots where the version has them.
func (c *Cluster) standbySettings(dir, slot string) map[string]string {
	settings := map[string]string{
		"unix_socket_directories": "'" + dir + "'",
		"primary_conninfo":        quoteLiteral(fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres application_name=standby", c.Port)),
		"primary_slot_name":       quoteLiteral(slot),
		"hot_standby":             "on",
		"hot_standby_feedback":    "on",
	}
	if c.Version >= MinFailoverVersion {
		settings["sync_replication_slots"] = "on"
	}
	return settings
}

// Kill ends the server with SIGKILL, as a crashed machine would: nothing
// is flushed, no walsender says goodbye. Stop still removes its directory.
func (c *Cluster) Kill() { c.kill() }

// Promote makes a standby a primary and waits until it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	if err := c.Exec(ctx, "postgres", "SELECT pg_promote(true, 60)"); err != nil {
		return fmt.Errorf("promote: %w", err)
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		conn, err := pgx.Connect(ctx, c.DSN("postgres"))
		if err != nil {
			continue
		}
		var inRecovery bool
		err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery)
		conn.Close(ctx)
		if err == nil && !inRecovery {
			return nil
		}
	}
	return fmt.Errorf("the standby is still in recovery a minute after pg_promote")
}

// WaitReplayed waits until the standby replayed the primary's WAL up to
// its current insert position.
func (c *Cluster) WaitReplayed(ctx context.Context, primary *Cluster) error {
	var target string
	conn, err := pgx.Connect(ctx, primary.DSN("postgres"))
	if err != nil {
		return err
	}
	err = conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&target)
	conn.Close(ctx)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		conn, err := pgx.Connect(ctx, c.DSN("postgres"))
		if err != nil {
			continue
		}
		var ok bool
		err = conn.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", target).Scan(&ok)
		conn.Close(ctx)
		if err == nil && ok {
			return nil
		}
	}
	return fmt.Errorf("the standby did not replay up to %s within a minute", target)
}

// SyncedSlot reports whether the standby holds a synchronized copy of the
// logical slot that is ready for use after a promotion (synced, not
// temporary).
func (c *Cluster) SyncedSlot(ctx context.Context, slot string) (bool, error) {
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return false, err
	}
	defer conn.Close(ctx)
	var ok bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND synced AND NOT temporary)", slot).Scan(&ok)
	return ok, err
}

// MultiHostDSN is a key=value DSN for database db listing the clusters in
// order, for a client that must find the one that accepts writes.
func MultiHostDSN(db string, clusters ...*Cluster) string {
	hosts, ports := "", ""
	for i, c := range clusters {
		if i > 0 {
			hosts, ports = hosts+",", ports+","
		}
		hosts += "127.0.0.1"
		ports += strconv.Itoa(c.Port)
	}
	return fmt.Sprintf("host=%s port=%s user=postgres dbname=%s sslmode=disable target_session_attrs=read-write connect_timeout=2", hosts, ports, db)
}

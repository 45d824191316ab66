package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

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

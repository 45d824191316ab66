package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/setup"
)

type bench struct {
	cluster *pgcluster.Cluster
	dsn     string
	conn    *pgx.Conn
	bin     string
	dir     string
	seq     int

	raw       bool          // run the raw reader beside a (workload h)
	rawResult *Result       // its figures
	delay     time.Duration // the next double's completion delay
}

const schema = `
CREATE TABLE t (id bigint PRIMARY KEY, name text, amount numeric(12,2), ts timestamptz, payload jsonb);
CREATE PUBLICATION pub FOR TABLE t;
CREATE TABLE live (id bigserial PRIMARY KEY, ts timestamptz NOT NULL DEFAULT clock_timestamp(), payload text);
CREATE PUBLICATION pub_live FOR TABLE live;
CREATE TABLE t2 (id bigint PRIMARY KEY, ref bigint, qty int);
CREATE PUBLICATION pub_two FOR TABLE t, t2;
CREATE PUBLICATION pub_live_two FOR TABLE live, t2;
CREATE TABLE wide (id bigint PRIMARY KEY, payload text);
ALTER TABLE wide ALTER COLUMN payload SET STORAGE EXTERNAL;
CREATE PUBLICATION pub_wide FOR TABLE wide;`

const felderaSchema = `
CREATE TABLE t (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, amount DECIMAL(12,2), ts TIMESTAMP_TZ, payload VARIANT);
CREATE TABLE live (id BIGINT NOT NULL PRIMARY KEY, ts TIMESTAMP_TZ NOT NULL, payload VARCHAR);
CREATE TABLE wide (id BIGINT NOT NULL PRIMARY KEY, payload VARCHAR);
CREATE TABLE t2 (id BIGINT NOT NULL PRIMARY KEY, ref BIGINT, qty INT);` + setup.ProgressDDL

// rowsSQL inserts rows [from, to] into t.
func rowsSQL(from, to int) string {
	return fmt.Sprintf(`INSERT INTO t SELECT g, 'name-' || g, g * 0.01, '2024-01-01'::timestamptz + g * interval '1 second',
		jsonb_build_object('k', g, 'v', 'payload') FROM generate_series(%d, %d) g`, from, to)
}

func newBench(bin string) (*bench, error) {
	c, err := pgcluster.Start(pgcluster.Options{Settings: map[string]string{
		"synchronous_commit": "off",
		"max_wal_size":       "8GB",
		"checkpoint_timeout": "30min",
		"shared_buffers":     "256MB",
		"wal_sender_timeout": "60s",
	}})
	if err != nil {
		return nil, err
	}
	b := &bench{cluster: c, dsn: c.DSN("postgres"), bin: bin}
	if b.dir, err = os.MkdirTemp("", "pgfeldera-bench-"); err != nil {
		c.Stop()
		return nil, err
	}
	if b.conn, err = pgx.Connect(context.Background(), b.dsn); err != nil {
		b.close()
		return nil, err
	}
	if err := b.exec(schema); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *bench) close() {
	if b.conn != nil {
		b.conn.Close(context.Background())
	}
	b.cluster.Stop()
	os.RemoveAll(b.cluster.Dir)
	if os.Getenv("BENCH_KEEP") == "" {
		os.RemoveAll(b.dir)
	}
}

// exec runs SQL with the simple protocol, so DO blocks may COMMIT.
func (b *bench) exec(sql string) error {
	_, err := b.conn.PgConn().Exec(context.Background(), sql).ReadAll()
	return err
}

// lsn is the WAL insert position: with the cluster's
// synchronous_commit=off, the write position (pg_current_wal_lsn) can lag
// behind the last commit, and a connector that acknowledged it would look
// finished before the last transaction was even decoded.
func (b *bench) lsn() (pglogrepl.LSN, error) {
	var s string
	if err := b.conn.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(s)
}

func (b *bench) createSlot(name string) error {
	return b.exec(fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", name))
}

func (b *bench) dropSlot(name string) error {
	var err error
	for i := 0; i < 100; i++ { // the walsender may still be exiting
		if err = b.exec(fmt.Sprintf("SELECT pg_drop_replication_slot('%s')", name)); err == nil || !strings.Contains(err.Error(), "is active") {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

func (b *bench) confirmed(slot string) (pglogrepl.LSN, error) {
	var s *string
	err := b.conn.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s)
	if err != nil || s == nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(*s)
}

// recvlogical drains slot up to end with pg_recvlogical into /dev/null.
func (b *bench) recvlogical(slot, pub string, end pglogrepl.LSN) (time.Duration, float64, error) {
	cmd := exec.Command(filepath.Join(b.cluster.BinDir, "pg_recvlogical"), "-d", b.dsn, "--slot", slot, "--start",
		"-o", "proto_version=1", "-o", "publication_names="+pub, "--endpos", end.String(), "--no-loop", "-f", "/dev/null")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("pg_recvlogical: %w: %s", err, out)
	}
	return time.Since(start), cpuSeconds(cmd.ProcessState), nil
}

// cpuSeconds is a finished process's user + system CPU time.
func cpuSeconds(ps *os.ProcessState) float64 {
	return (ps.UserTime() + ps.SystemTime()).Seconds()
}

// pgf is one pgfeldera process and the double it writes to.
type pgf struct {
	cmd   *exec.Cmd
	fel   *felderatest.Server
	log   string
	start time.Time
	done  chan struct{}
}

func (b *bench) startPGF(slot, tables, pub, snapshotMode string, env map[string]string, onIngress func(string, []byte, time.Time)) (*pgf, error) {
	// The double counts lines and completes tokens at once (steps that
	// take no time): the figures are pgfeldera's, not a Feldera's. With
	// the double's default steps (2 to 5 ms each) c measured the steps:
	// 0.30 × COPY instead of 0.57-0.65 × (2026-12-07).
	fel, err := felderatest.NewServer(felderatest.Config{Pipeline: "bench", Tables: felderatest.MustParseDDL(felderaSchema),
		CountOnly: true, OnIngress: onIngress, StepTime: -1})
	if err != nil {
		return nil, err
	}
	fel.SetCompletionDelay(b.delay)
	b.seq++
	logPath := filepath.Join(b.dir, fmt.Sprintf("pgfeldera-%d.log", b.seq))
	logf, err := os.Create(logPath)
	if err != nil {
		fel.Close()
		return nil, err
	}
	cmd := exec.Command(b.bin, "run")
	cmd.Env = append(os.Environ(),
		"PG_DSN="+b.dsn, "PG_PUBLICATION="+pub, "PG_SLOT="+slot, "TABLES="+tables,
		"FELDERA_URL="+fel.URL, "FELDERA_PIPELINE=bench", "SNAPSHOT_MODE="+snapshotMode,
		"STATE_FILE="+filepath.Join(b.dir, fmt.Sprintf("state-%d.json", b.seq)), "HTTP_ADDR=off", "LOG_LEVEL="+logLevel())
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &pgf{cmd: cmd, fel: fel, log: logPath, start: time.Now(), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		logf.Close()
		fel.Close()
		return nil, err
	}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// stop ends the process gracefully and returns its peak RSS in bytes
// and the CPU seconds it used.
func (p *pgf) stop() (rss int64, cpu float64, err error) {
	defer p.fel.Close()
	select {
	case <-p.done:
		return 0, 0, p.failure("exited early")
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return 0, 0, p.failure("did not stop within 30 s of SIGTERM")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return 0, 0, p.failure(fmt.Sprintf("exit %d", code))
	}
	if ru, _ := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ru != nil {
		rss = ru.Maxrss * 1024
	}
	return rss, cpuSeconds(p.cmd.ProcessState), nil
}

func (p *pgf) failure(what string) error {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return fmt.Errorf("pgfeldera %s; log tail:\n%s", what, strings.Join(lines, "\n"))
}

// waitFor polls cond every 2 ms until it holds; the process must stay up.
func (p *pgf) waitFor(what string, timeout time.Duration, cond func() (bool, error)) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return 0, err
		}
		if ok {
			return time.Since(p.start), nil
		}
		select {
		case <-p.done:
			return 0, p.failure("exited while waiting for " + what)
		default:
		}
		if time.Now().After(deadline) {
			return 0, p.failure("timed out waiting for " + what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// drainPGF streams slot up to end and returns the time until the slot's
// confirmed_flush_lsn reached it, having checked every row arrived.
func (b *bench) drainPGF(slot string, end pglogrepl.LSN, rows int) (time.Duration, float64, error) {
	p, err := b.startPGF(slot, "t", "pub", "never", nil, nil)
	if err != nil {
		return 0, 0, err
	}
	d, err := p.waitFor("confirmed_flush_lsn "+end.String(), 10*time.Minute, func() (bool, error) {
		c, err := b.confirmed(slot)
		return c >= end, err
	})
	got := p.fel.CountedRows("t")
	_, cpu, serr := p.stop()
	if err == nil {
		err = serr
	}
	if err == nil && got < rows {
		err = p.failure(fmt.Sprintf("let the slot confirm %s but the double counted %d rows, want %d", end, got, rows))
	}
	return d, cpu, err
}

// rawDrain reads slot's pgoutput stream and only counts insert messages,
// without decoding them, until it counted rows: the walsender's ceiling on
// this machine, with no client work beyond the protocol.
func (b *bench) rawDrain(slot, pub string, rows int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg, err := pgconn.ParseConfig(b.dsn)
	if err != nil {
		return 0, err
	}
	cfg.RuntimeParams["replication"] = "database"
	start := time.Now()
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	err = pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: []string{
		"proto_version '1'", "publication_names '" + pub + "'"}})
	if err != nil {
		return 0, fmt.Errorf("raw reader: %w", err)
	}
	var pos pglogrepl.LSN
	next := time.Now().Add(time.Second)
	for n := 0; n < rows; {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return 0, fmt.Errorf("raw reader after %d inserts: %w", n, err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 {
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.XLogDataByteID:
			// 1 byte tag, 24 bytes of header, then the pgoutput message.
			if len(cd.Data) > 25 && cd.Data[25] == 'I' {
				n++
			}
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			if pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:]); err == nil && pkm.ReplyRequested {
				next = time.Now()
			}
		}
		if time.Now().After(next) {
			next = time.Now().Add(time.Second)
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: pos}); err != nil {
				return 0, err
			}
		}
	}
	return time.Since(start), nil
}

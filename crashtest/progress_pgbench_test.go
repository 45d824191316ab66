package crashtest_test

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/oracle"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/setup"
)

// The acceptance of the progress table, over the real binary and pgbench's
// tpcb-like transactions (each adds one delta to an account, a teller and
// a branch, so in every state Postgres had the three sums are equal):
//
//   - at_least_once with no checkpoint asked for: 20 s of writes, all of
//     them in Feldera, then the connector killed. The restart sends
//     nothing again and no state breaks the sums; then Feldera restarts
//     in place, back to its last checkpoint and that checkpoint's row,
//     and the end is exact. Without the table the restart replays what
//     Feldera held since the last checkpoint and states break.
//   - crashes at after_begin and before_commit while pgbench writes: no
//     state breaks the sums, the end is exact. before_commit without the
//     table too: every table is keyed, so the restart joins the
//     transaction left open and its replay only upserts what it holds
//     (it committed it before, and the replay of what it held broke
//     states).
func TestProgress_Pgbench(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, c := range []struct {
		name   string
		crash  string // CRASH_AT, or "": all writes in, then a kill
		off    bool
		breaks bool // without the table, states break (the unsafe variant)
	}{
		{"at_least_once", "", false, false},
		{"at_least_once/off", "", true, true},
		{"after_begin", "after_begin", false, false},
		{"before_commit", "before_commit", false, false},
		{"before_commit/off", "before_commit", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ft := ""
			if c.crash == "" {
				ft = `{"model": "at_least_once", "checkpoint_interval_secs": null}`
			}
			b := newPgbenchWorld(t, ft)
			env := []string{"FELDERA_PROGRESS_TABLE=on", "FELDERA_CHECKPOINT_AFTER=1h", "FELDERA_TRANSACTIONS=always"}
			if c.off {
				env[0] = "FELDERA_PROGRESS_TABLE=off"
			}
			if c.crash == "" {
				b.killAfterWrites(t, env)
			} else {
				b.crashWhileWriting(t, env, c.crash)
			}
			states, broken, resent := b.states, len(b.broken), b.resent
			t.Logf("%d of %d states broke the sums; %d rows sent again that Feldera held", broken, states, resent)
			switch {
			case c.breaks && broken == 0:
				t.Fatalf("without the progress table no state broke the sums (%d rows sent again): the test cannot see a replay", resent)
			case c.breaks:
			case broken > 0:
				t.Fatalf("%d of %d states broke the sums, the first: %s", broken, states, b.broken[0])
			case c.off:
				// Joined without the table: the replay sends rows Feldera
				// holds again, into the transaction that holds them.
			case resent > 0:
				t.Fatalf("%d rows that Feldera held were sent again", resent)
			}
		})
	}
}

// pgbenchWorld is a world of pgbench's tables and a check of every state
// the double shows.
type pgbenchWorld struct {
	w      *world
	tool   string
	mu     sync.Mutex
	states int
	broken []string
	resent int // rows POSTed again that Feldera held (at_least_once case)
}

func newPgbenchWorld(t *testing.T, ft string) *pgbenchWorld {
	b := &pgbenchWorld{tool: pgcluster.Tool(t, "pgbench")}
	b.w = newWorld(t, func(c *felderatest.Config) {
		crashDouble(c)
		if ft != "" {
			c.FaultTolerance = ft
		}
		c.Tables = felderatest.MustParseDDL(oracle.PgbenchDDL + setup.ProgressDDL)
		c.OnState = b.see
	})
	b.w.compared = nil
	for _, tb := range oracle.PgbenchTables {
		b.w.compared = append(b.w.compared, [2]string{tb, tb})
	}
	b.pgbench("-i", "-s", "1", "-q")
	b.w.exec("CREATE PUBLICATION pgb FOR TABLE pgbench_accounts, pgbench_tellers, pgbench_branches")
	return b
}

// see checks a state (oracle.PgbenchSums).
func (b *pgbenchWorld) see(v felderatest.View) {
	if v.Len("pgbench_accounts") < 100_000 {
		return
	}
	ok, why := oracle.PgbenchSums(v)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.states++
	if !ok {
		b.broken = append(b.broken, why)
	}
}

func (b *pgbenchWorld) pgbench(args ...string) {
	b.w.t.Helper()
	if err := b.run(args...); err != nil {
		b.w.t.Fatal(err)
	}
}

// run runs pgbench; it may be called from any goroutine.
func (b *pgbenchWorld) run(args ...string) error {
	out, err := exec.Command(b.tool, append(args, b.w.dsn)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgbench %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// start runs pgfeldera on pgbench's tables.
func (b *pgbenchWorld) start(env ...string) *proc {
	return b.w.start(append([]string{"PG_PUBLICATION=pgb", "TABLES=" + strings.Join(oracle.PgbenchTables, ","), "SNAPSHOT_MODE=initial"}, env...)...)
}

// caughtUp waits until the slot confirmed the current WAL position and
// Feldera holds what Postgres holds (world.caughtUp).
func (b *pgbenchWorld) caughtUp(p *proc) {
	b.w.t.Helper()
	if msg := b.w.caughtUp(p, 120*time.Second); msg != "" {
		b.w.t.Fatalf("not caught up: %s\n%s", msg, b.w.log())
	}
}

// sent counts the rows of pgbench's tables the double's ingress received.
func (b *pgbenchWorld) sent() int {
	n := 0
	for _, r := range b.w.fel.Requests() {
		if strings.HasPrefix(strings.ToLower(r.Table), "pgbench_") {
			n += r.Lines
		}
	}
	return n
}

// killAfterWrites: 2,000 transactions (20 s at the rate asked, longer on
// a slow machine: a count, not a duration, so the load is the same), all
// in Feldera, a kill, a restart that asks for checkpoints; then Feldera
// restarts in place.
func (b *pgbenchWorld) killAfterWrites(t *testing.T, env []string) {
	p := b.start(env...)
	inFeldera := func() bool { return p.streaming() && b.w.oracle() == "" }
	b.w.poll("the snapshot in Feldera", 120*time.Second, inFeldera)
	b.pgbench("-n", "-t", "1000", "-R", "100", "-c", "2", "-j", "1")
	b.w.poll("every write in Feldera", 120*time.Second, inFeldera) // the slot waits for a checkpoint
	p.kill()
	before := b.sent()
	p2 := b.start(append(env[:2:2], "FELDERA_CHECKPOINT_AFTER=1s", env[2])...)
	b.caughtUp(p2)
	b.resent = b.sent() - before
	if strings.Contains(env[0], "off") {
		p2.stop(t)
		return
	}
	b.pgbench("-n", "-t", "50", "-c", "1")
	b.caughtUp(p2)
	b.w.fel.RestartInPlace() // back to its last checkpoint, which may lack the last writes
	b.caughtUp(p2)
	p2.stop(t)
}

// crashWhileWriting crashes the connector at point while pgbench writes,
// restarts it, and waits for the end of the writes.
//
// pgbench writes until the first run reached its crash point, in runs of
// 200 transactions (2 s at the rate asked): how many Feldera transactions
// a given load makes depends on the machine's speed (a slow connector
// groups more into each), so no fixed load is sure to reach the 20th. The
// first run may take as long as it needs, the snapshot first (100,000
// rows: half a minute under -race, far longer on a busy machine), as long
// as it and the double keep moving.
func (b *pgbenchWorld) crashWhileWriting(t *testing.T, env []string, point string) {
	p := b.start(append(env, "CRASH_AT="+point, "CRASH_AFTER_BATCHES=20", "FELDERA_CHECKPOINT_AFTER=1s")...)
	b.caughtUp(p)
	var crashed atomic.Bool
	done := make(chan error, 1)
	go func() {
		for {
			if err := b.run("-n", "-t", "100", "-R", "100", "-c", "2", "-j", "1"); err != nil || crashed.Load() {
				done <- err
				return
			}
		}
	}()
	code := p.exited(2 * time.Minute)
	crashed.Store(true)
	if code != 70 {
		p.kill()
		err := <-done
		t.Fatalf("the first run exited %d (-1: alive, nothing moved for 2 min), want 70 at %s; pgbench: %v; the double: %d requests, %d Feldera transactions committed\n%s",
			code, point, err, b.w.fel.RequestCount(), b.w.fel.TransactionsCommitted(), b.w.log())
	}
	p2 := b.start(append(env[:1:1], "FELDERA_CHECKPOINT_AFTER=1s", env[2])...)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.caughtUp(p2)
	p2.stop(t)
}

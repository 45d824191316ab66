package crashtest_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/setup"
)

// Exactly once with the progress table (FELDERA_PROGRESS_TABLE=on), over
// the real binary: ten users hold 1,000 points between them, and every
// source transaction moves points from one to another, so every state the
// source had sums to 1,000. BATCH_MAX_ROWS=1 cuts every transfer across
// batches, so a crash can leave Feldera holding its first half.
//
//   - after_post of the first stream batch: the crash leaves a Feldera
//     transaction open with half a transfer. The restart joins it; no
//     state Feldera shows breaks the sum. Without the table too, since
//     every table is keyed (a replay into it is harmless). With a keyless
//     table mapped besides and no table (the unsafe variant), the restart
//     commits it, and the test sees the broken state.
//   - after_complete of the second batch: the first transfer is committed
//     with its progress row, and the slot has not heard of it. The
//     restart skips it: no row of it is sent again. Without the table it
//     is sent again.
//   - a kill at a random moment while transfers stream: no state breaks
//     the sum, nothing is lost.
//
// Feldera keeps running across the crash: the connector crashed, not the
// pipeline.
func TestProgress_CrashesKeepEveryStateWhole(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, c := range []struct {
		name    string
		crash   []string // CRASH_AT and CRASH_AFTER_BATCHES, or none: a kill
		off     bool     // without the progress table
		keyless bool     // a keyless table mapped besides (without the table: the unsafe variant)
	}{
		{"after_post", []string{"CRASH_AT=after_post", "CRASH_AFTER_BATCHES=1"}, false, false},
		{"after_post/off", []string{"CRASH_AT=after_post", "CRASH_AFTER_BATCHES=1"}, true, false},
		{"after_post/off_keyless_UNSAFE", []string{"CRASH_AT=after_post", "CRASH_AFTER_BATCHES=1"}, true, true},
		{"after_complete", []string{"CRASH_AT=after_complete", "CRASH_AFTER_BATCHES=2"}, false, false},
		{"after_complete/off", []string{"CRASH_AT=after_complete", "CRASH_AFTER_BATCHES=2"}, true, false},
		{"kill", nil, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newBank(t)
			env := []string{"BATCH_MAX_ROWS=1", "FELDERA_PROGRESS_TABLE=on"}
			if c.off {
				env[1] = "FELDERA_PROGRESS_TABLE=off"
			}
			if c.keyless {
				b.w.exec("CREATE TABLE events (k bigint, name text); ALTER TABLE events REPLICA IDENTITY FULL; ALTER PUBLICATION pub ADD TABLE events")
				env = append(env, "TABLES=users,public.items:catalog_items,events", "FELDERA_REQUIRE_PRIMARY_KEY=false")
			}
			p := b.w.start(append(env, c.crash...)...)
			b.w.poll("pgfeldera to stream", 60*time.Second, p.streaming)
			if c.crash == nil {
				stop := b.transferAll(40 * time.Millisecond)
				time.Sleep(time.Duration(500+rand.Intn(1500)) * time.Millisecond)
				p.kill()
				stop()
			} else {
				b.transfer(0) // both crash points are in its two batches
				if code := p.exited(60 * time.Second); code != 70 {
					t.Fatalf("the first run exited %d, want 70 at %s\n%s", code, c.crash[0], b.w.log())
				}
			}
			before := b.sent()
			p2 := b.w.start(env...)
			if msg := b.w.caughtUp(p2, 120*time.Second); msg != "" {
				t.Fatalf("after the restart: %s", msg)
			}
			resent := b.sent() - before
			for i := 1; i < 6; i++ {
				b.transfer(i)
			}
			if msg := b.w.caughtUp(p2, 120*time.Second); msg != "" {
				t.Fatalf("after the last transfers: %s", msg)
			}
			p2.stop(t)
			broken := b.brokenStates()
			t.Logf("%d of %d states broke the sum; %d rows of users sent by the restart before the next write", len(broken), b.states.Load(), resent)
			switch {
			case c.keyless && len(broken) == 0:
				t.Fatal("with a keyless table and no progress table, no state showed the half transfer the crash left: the test cannot see it")
			case c.off && !c.keyless && len(broken) > 0:
				t.Fatalf("every table keyed, without the progress table %d states broke the sum (the transaction left open was committed, not joined), the first: %s", len(broken), broken[0])
			case c.name == "after_complete/off" && resent == 0:
				t.Fatal("without the progress table, the restart sent nothing again: the test cannot see a replay")
			case !c.off && len(broken) > 0:
				t.Fatalf("%d states broke the sum, the first: %s", len(broken), broken[0])
			case c.name == "after_complete" && resent != 0:
				t.Fatalf("the restart sent %d rows of users again that Feldera held with their progress row", resent)
			}
		})
	}
}

// Under at_least_once with no checkpoint asked for, the slot does not move
// while Feldera holds everything the connector sent: a connector killed
// after its writes were all in replays every one of them, and a view sees
// points move back (states that never existed, the sum broken while a
// replayed transfer sets two users to old values). With the progress
// table the restart skips all of it: no row sent again, no state broken.
// Then, the restart asking for checkpoints every second, Feldera restarts
// in place right after five more transfers: it restores its last
// checkpoint and that checkpoint's progress row together, and the
// connector sends what followed, exactly, no state broken.
func TestProgress_AtLeastOnceReplaysNothingFelderaHolds(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, off := range []bool{false, true} {
		t.Run(map[bool]string{false: "on", true: "off"}[off], func(t *testing.T) {
			t.Parallel()
			b := newBankFT(t, `{"model": "at_least_once", "checkpoint_interval_secs": null}`)
			env := []string{"BATCH_MAX_ROWS=1", "FELDERA_PROGRESS_TABLE=on", "FELDERA_CHECKPOINT_AFTER=1h"}
			if off {
				env[1] = "FELDERA_PROGRESS_TABLE=off"
			}
			p := b.w.start(env...)
			b.w.poll("pgfeldera to stream", 60*time.Second, p.streaming)
			for i := range 30 {
				b.transfer(i)
				if i == 14 {
					b.w.poll("the first transfers in Feldera", 60*time.Second, func() bool { return b.w.oracle() == "" })
					if err := b.w.fel.Checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
			}
			b.w.poll("every transfer in Feldera", 60*time.Second, func() bool { return b.w.oracle() == "" })
			p.kill()
			before := b.sent()
			// The restart asks for checkpoints, so the slot can catch up.
			p2 := b.w.start(append(env[:2:2], "FELDERA_CHECKPOINT_AFTER=1s")...)
			if msg := b.w.caughtUp(p2, 120*time.Second); msg != "" {
				t.Fatalf("after the connector's restart: %s", msg)
			}
			resent := b.sent() - before
			broken := b.brokenStates()
			t.Logf("connector restart: %d rows of users sent again, %d of %d states broke the sum", resent, len(broken), b.states.Load())
			if off {
				if resent == 0 || len(broken) == 0 {
					t.Fatalf("without the progress table the restart sent %d rows again and broke %d states: the test cannot see a replay", resent, len(broken))
				}
				return
			}
			if resent != 0 || len(broken) != 0 {
				t.Fatalf("the restart sent %d rows of users again that Feldera held, and %d states broke the sum (%v)", resent, len(broken), broken)
			}

			for i := 30; i < 35; i++ {
				b.transfer(i)
			}
			b.w.poll("the last transfers in Feldera", 60*time.Second, func() bool { return b.w.oracle() == "" })
			b.w.fel.RestartInPlace() // back to its last checkpoint, which may lack the last transfers
			if msg := b.w.caughtUp(p2, 120*time.Second); msg != "" {
				t.Fatalf("after Feldera's restart: %s", msg)
			}
			p2.stop(t)
			if broken := b.brokenStates(); len(broken) != 0 {
				t.Fatalf("%d states broke the sum after Feldera's restart, the first: %s", len(broken), broken[0])
			}
			t.Logf("Feldera restart: %d rows of users sent after it, %d states", b.sent()-before-resent, b.states.Load())
		})
	}
}

// bank is a world whose users hold 1,000 points, and a check of every
// state the double shows.
type bank struct {
	w      *world
	mu     sync.Mutex
	broken []string
	states atomic.Int64
}

func newBank(t *testing.T) *bank { return newBankFT(t, "") }

// newBankFT is newBank on a double of the given fault tolerance ("": the
// crash suite's).
func newBankFT(t *testing.T, ft string) *bank {
	b := &bank{}
	b.w = newWorld(t, func(c *felderatest.Config) {
		crashDouble(c)
		if ft != "" {
			c.FaultTolerance = ft
		}
		c.Tables = felderatest.MustParseDDL(felderaDDL + keylessDDL + setup.ProgressDDL)
		c.OnState = b.see
	})
	b.w.exec("INSERT INTO users SELECT g, 'u' || g, 100 FROM generate_series(1, 10) g")
	return b
}

// see checks a state: once the snapshot is in, the users hold 1,000.
func (b *bank) see(v felderatest.View) {
	if v.Len("users") != 10 {
		return
	}
	b.states.Add(1)
	sum, err := v.SumInt("users", "score")
	if err == nil && sum == 1000 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.broken = append(b.broken, fmt.Sprintf("sum %d (%v)", sum, err))
}

func (b *bank) brokenStates() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.broken...)
}

// transfer runs the i-th transfer: two users, some points.
func (b *bank) transfer(i int) {
	from, to, n := i%10+1, (i+3)%10+1, i%7+1
	b.w.exec(fmt.Sprintf("BEGIN; UPDATE users SET score = score - %d WHERE id = %d; UPDATE users SET score = score + %d WHERE id = %d; COMMIT", n, from, n, to))
}

// transferAll runs transfers on its own until the returned stop.
func (b *bank) transferAll(pause time.Duration) (stop func()) {
	var halt atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !halt.Load(); i++ {
			b.transfer(i)
			time.Sleep(pause)
		}
	}()
	return func() { halt.Store(true); wg.Wait() }
}

// sent counts the rows of users the double's ingress received.
func (b *bank) sent() int {
	n := 0
	for _, r := range b.w.fel.Requests() {
		if strings.EqualFold(r.Table, "users") {
			n += r.Lines
		}
	}
	return n
}

// A fresh deployment whose pipeline declares the progress table, with
// FELDERA_PROGRESS_TABLE unset: the default uses the table, the start
// says so once (not per session: a Feldera restart starts another one),
// and the row is written under the source's key.
func TestProgress_OnByDefaultWhenDeclared(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	w := newWorld(t, progressDouble)
	w.exec("INSERT INTO users SELECT g, 'u' || g, g FROM generate_series(1, 10) g")
	p := w.start()
	w.poll("pgfeldera to stream", 60*time.Second, p.streaming)
	w.exec("INSERT INTO users VALUES (11, 'streamed', 11)")
	w.fel.Restart() // a second session in the same process
	w.exec("INSERT INTO users VALUES (12, 'after the restart', 12)")
	target := w.lsn("SELECT pg_current_wal_insert_lsn()::text")
	w.poll("the slot to pass the writes", 90*time.Second, func() bool { return w.confirmed() >= target })
	p.stop(t)
	out := p.output()
	if n := strings.Count(out, "progress: the pipeline declares "+setup.ProgressTable); n != 1 {
		t.Fatalf("the start said %d times that it uses the progress table, want once:\n%s", n, excerpt(out, 3000))
	}
	var sysid string
	if err := w.db.QueryRow(context.Background(), "SELECT system_identifier::text FROM pg_control_system()").Scan(&sysid); err != nil {
		t.Fatal(err)
	}
	var db string
	if err := w.db.QueryRow(context.Background(), "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if row, ok := w.rowOf(fmt.Sprintf("%q", sysid+"/"+db+"/"+w.slot)); !ok || row < target {
		t.Fatalf("progress row %s (found %v), want one at or past %s under the source's key; rows %v", row, ok, target, w.fel.Rows(setup.ProgressTable))
	}
}

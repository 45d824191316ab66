package crashtest_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/oracle"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/state"
)

// A keyless destination (REPLICA IDENTITY FULL in Postgres, no PRIMARY
// KEY in Feldera) holds a multiset: a row sent twice is there twice.
// With the progress table a replay skips whole every source transaction
// Feldera committed, so what decides exactness is the Feldera transaction
// a crash leaves open:
//
//   - Feldera restarts too (it drops the open transaction): the replay
//     starts at the committed row, exact;
//   - the crash comes after every POST of the transaction was answered,
//     its row last (before_commit): it is whole, the restart commits it
//     and sends none of it again, exact;
//   - the crash comes inside a transaction that Feldera keeps open
//     (after_post of a batch that ends inside a source transaction): the
//     restart joins it and replays into it, skipping of each table as
//     many records as its ingress endpoints took since the fence file's
//     count (delivery/txncount.go), exact. Without the counts (the
//     fence file's stripped: the unsafe variant) the keyless table gets
//     exactly the open transaction's rows twice, which the test checks;
//   - a source transaction larger than a Feldera transaction holds is
//     committed in parts without a row, and the crash leaves the next
//     part open: the restart skips both, counted past the row, exact;
//     uncounted, both twice.
//
// Each case writes the same history: duplicate rows, a transaction of
// 30 rows cut across batches (BATCH_MAX_ROWS=4), a DELETE of one copy of
// a duplicated row, an UPDATE.
func TestProgress_KeylessAcrossCrashes(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, c := range []struct {
		name    string
		point   string
		n       int
		big     int  // rows of the big transaction
		restart bool // Feldera restarts after the crash
		joined  bool // the restart joins a transaction the crash left open
		dups    bool // the fence file's counts stripped: what Feldera holds past the row twice
	}{
		{"after_post/feldera_restarts", "after_post", 3, 30, true, false, false},
		{"before_commit", "before_commit", 1, 30, false, false, false},
		{"after_post/joined", "after_post", 3, 30, false, true, false},
		{"after_post/joined_uncounted_UNSAFE", "after_post", 3, 30, false, true, true},
		// 9,000 rows in batches of 4 are three Feldera transactions (one
		// holds at most 1,024 batches in flight): the first committed
		// without a row, the second open at the crash.
		{"cut_in_parts/joined", "before_commit", 2, 9000, false, true, false},
		{"cut_in_parts/joined_uncounted_UNSAFE", "before_commit", 2, 9000, false, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, func(fc *felderatest.Config) {
				crashDouble(fc)
				fc.Tables = felderatest.MustParseDDL(felderaDDL + "CREATE TABLE events (id INT, v VARCHAR) WITH ('materialized' = 'true');\n" + setup.ProgressDDL)
			})
			w.exec("CREATE TABLE events (id int, v text); ALTER TABLE events REPLICA IDENTITY FULL; CREATE PUBLICATION pubk FOR TABLE events")
			w.exec("INSERT INTO events SELECT g % 5, 'pre' FROM generate_series(1, 20) g")                           // each row four times
			env := []string{"PG_PUBLICATION=pubk", "TABLES=events", "FELDERA_PROGRESS_TABLE=on", "BATCH_MAX_ROWS=4"} // keyless accepted: the table keeps it exact
			p := w.start(append(env, "CRASH_AT="+c.point, fmt.Sprintf("CRASH_AFTER_BATCHES=%d", c.n))...)
			w.poll("pgfeldera to stream", 60*time.Second, p.streaming)
			w.exec(fmt.Sprintf("INSERT INTO events SELECT g %% 3, 'big' FROM generate_series(1, %d) g", c.big))
			if code := p.exited(60 * time.Second); code != 70 {
				t.Fatalf("the first run exited %d, want 70 at %s\n%s", code, c.point, w.log())
			}
			open := openLines(w.fel.Requests())
			if c.restart {
				w.fel.Restart()
			}
			if c.joined {
				w.countsInFence(c.dups)
			}
			p2 := w.start(env...)
			w.exec("DELETE FROM events WHERE ctid = (SELECT min(ctid) FROM events WHERE id = 1 AND v = 'pre')")
			w.exec("UPDATE events SET v = 'moved' WHERE id = 2 AND v = 'big'")
			// The target is fixed once: other tests' writes move the WAL
			// end on, and the slot follows them a status interval behind
			// (a row alone at most once per interval).
			target := w.lsn("SELECT pg_current_wal_insert_lsn()::text")
			w.poll("the restart to acknowledge everything", 120*time.Second, func() bool {
				return p2.streaming() && w.confirmed() >= target
			})
			p2.stop(t)
			r, err := oracle.Compare(context.Background(), w.db, "events", w.fel, "events")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d rows in Postgres, %d in Feldera; the first run sent %d changes past its last progress row", c.name, r.Postgres, r.Feldera, open)
			if !c.dups {
				if !r.Equal() {
					t.Fatalf("not an exact multiset: %s", r.String())
				}
				return
			}
			if len(r.Missing) != 0 || len(r.Extra) == 0 || len(r.Extra) != open {
				t.Fatalf("joined without counts: want exactly the %d rows sent past the progress row twice, and nothing missing; got %d extra, %d missing (%s)", open, len(r.Extra), len(r.Missing), strings.TrimSpace(r.String()))
			}
		})
	}
}

// countsInFence checks that the fence file counts the keyless table past
// the progress row, and strips the counts when strip says so: the next
// process then cannot tell what the open transaction holds.
func (w *world) countsInFence(strip bool) {
	w.t.Helper()
	path := state.FencePath(filepath.Join(w.dir, "state.json"))
	f, err := state.LoadFence(path)
	if err != nil {
		w.t.Fatal(err)
	}
	if f.Transaction == nil || f.Transaction.Whole {
		w.t.Fatalf("the crash left no open, unwhole transaction in the fence file: %+v", f.Transaction)
	}
	if f.Past == nil || f.Past.Counted == "" {
		w.t.Fatalf("the fence file counts nothing past the progress row: %+v", f.Past)
	}
	if _, ok := f.Past.Taken["events"]; !ok {
		w.t.Fatalf("the fence file has no count for events past the progress row: %+v", f.Past)
	}
	if strip {
		f.Past = nil
		if err := state.SaveFence(path, f); err != nil {
			w.t.Fatal(err)
		}
	}
}

// A keyless Feldera table is refused by default, the refusal naming the
// progress table that makes replays exact, and accepted with it without
// FELDERA_REQUIRE_PRIMARY_KEY=false.
func TestProgress_KeylessAcceptedWithTheTable(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	w := newWorld(t, func(fc *felderatest.Config) {
		crashDouble(fc)
		fc.Tables = felderatest.MustParseDDL(felderaDDL + "CREATE TABLE events (id INT, v VARCHAR) WITH ('materialized' = 'true');\n" + setup.ProgressDDL)
	})
	w.exec("CREATE TABLE events (id int, v text); ALTER TABLE events REPLICA IDENTITY FULL; CREATE PUBLICATION pubk FOR TABLE events")
	env := []string{"PG_PUBLICATION=pubk", "TABLES=events"}
	off := w.start(append(env, "FELDERA_PROGRESS_TABLE=off")...)
	if code := off.exited(60 * time.Second); code != 1 || !strings.Contains(off.output(), "no PRIMARY KEY") || !strings.Contains(off.output(), setup.ProgressTable) {
		t.Fatalf("without the progress table: exit %d, want 1 (fatal) with a refusal naming %s\n%s", code, setup.ProgressTable, off.output())
	}
	on := w.start(append(env, "FELDERA_PROGRESS_TABLE=on")...)
	w.poll("pgfeldera to stream a keyless table with the progress table", 60*time.Second, on.streaming)
	on.stop(t)
}

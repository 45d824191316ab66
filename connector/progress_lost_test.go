package connector_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/state"
)

// With the progress table the slot never passes the row Feldera holds, so
// a Feldera that went back (storage lost, an older state restored) shows
// a row below the slot, or none: startup resnapshots, naming both
// positions, and Feldera ends exact. Here Feldera goes back by hand while
// pgfeldera is stopped: the last three streamed rows are gone and the row
// is set back to before them ("behind"), or is gone too ("removed"). The
// unsafe variant (TrustProgressLoss) streams on from the slot, which has
// forgotten those rows: they stay lost.
func TestProgress_FelderaBehindTheSlotResnapshots(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, c := range []struct {
		name    string
		removed bool
		trust   bool
	}{{"behind", false, false}, {"removed", true, false}, {"behind/trusted", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e, cfg := progressEnv(t)
			r := e.start(cfg)
			e.waitSlot()
			for id := 500; id < 503; id++ {
				e.exec(fmt.Sprintf("INSERT INTO users VALUES (%d, 'kept', 0)", id))
			}
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			back := progressRow(t, e)
			for id := 503; id < 506; id++ {
				e.exec(fmt.Sprintf("INSERT INTO users VALUES (%d, 'lost', 0)", id))
			}
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			confirmed := e.confirmed() // where the stop left the slot: the restart reads it
			if row := progressRow(t, e); row < confirmed {
				t.Fatalf("the progress row is %s after the slot confirmed %s", row, confirmed)
			}

			// Feldera goes back.
			for id := 503; id < 506; id++ {
				if err := e.fel.Delete("users", fmt.Sprintf(`{"id": %d}`, id)); err != nil {
					t.Fatal(err)
				}
			}
			row := fmt.Sprintf(`{"slot": %q, "lsn": %d}`, e.progressKey(), uint64(back))
			var err error
			if c.removed {
				err = e.fel.Delete("pgfeldera_progress", row)
			} else {
				err = e.fel.Put("pgfeldera_progress", row)
			}
			if err != nil {
				t.Fatal(err)
			}

			conn := e.newConnector(cfg, e.client)
			if c.trust {
				connector.TrustProgressLoss(conn)
			}
			r = e.run(conn)
			if !c.trust {
				// The resnapshot's new slot confirms its consistent point
				// at once, before the copy is in: wait for the copy (the
				// first run's snapshot said so once already), else the
				// stop below interrupts it.
				e.poll("the resnapshot to complete", 60*time.Second, func() bool {
					return strings.Count(e.logs.String(), "snapshot: complete") >= 2
				})
			}
			e.waitSlot()
			e.exec("INSERT INTO users VALUES (600, 'after', 0)")
			e.waitConfirmed(e.currentLSN(), 60*time.Second)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if c.trust {
				if got := e.fel.Len("users"); got != 104 {
					t.Fatalf("trusting the row, Feldera holds %d rows, want 104 (the three it lost): the test cannot see the loss", got)
				}
				return
			}
			e.assertEqual("users", "users")
			logs := e.logs.String()
			i := strings.Index(logs, "startup: resnapshot")
			if i < 0 {
				t.Fatalf("no resnapshot at startup:\n%s", tail(logs, 3000))
			}
			line := logs[i:]
			line = line[:strings.IndexByte(line, '\n')]
			t.Log(line)
			want := []string{"slot's confirmed position " + confirmed.String()}
			if !c.removed {
				want = append(want, "up to "+back.String())
			}
			for _, w := range want {
				if !strings.Contains(line, w) {
					t.Errorf("the resnapshot's reason does not name %q: %s", w, line)
				}
			}
		})
	}
}

// progressKey is the key of e's progress row: the server's system
// identifier, the database and the slot (delivery.Progress.Key).
func (e *env) progressKey() string {
	e.t.Helper()
	var sysid, db string
	if err := e.db.QueryRow(context.Background(), "SELECT system_identifier::text, current_database() FROM pg_control_system()").Scan(&sysid, &db); err != nil {
		e.t.Fatal(err)
	}
	return sysid + "/" + db + "/" + e.slot
}

// progressRow is the slot's progress row in the double (0: none).
func progressRow(t *testing.T, e *env) pglogrepl.LSN {
	t.Helper()
	key := e.progressKey()
	for _, r := range e.fel.Rows("pgfeldera_progress") {
		if string(r["slot"]) == fmt.Sprintf("%q", key) {
			n, err := strconv.ParseUint(string(r["lsn"]), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return pglogrepl.LSN(n)
		}
	}
	return 0
}

// The initial snapshot writes the progress row at the slot's consistent
// point once the copy is in, and the state file it marks complete says
// the slot keeps behind the row: a Feldera that loses the copy before the
// stream acknowledged anything is seen by the row too.
func TestProgress_SnapshotWritesTheRow(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	var mu sync.Mutex
	var first string // the first progress row any state showed
	e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera+setup.ProgressDDL, func(fc *felderatest.Config) {
		fc.OnState = func(v felderatest.View) {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range v.Rows("pgfeldera_progress") {
				if first == "" && string(r["lsn"]) != "0" {
					first = string(r["lsn"])
				}
			}
		}
	})
	e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 100) g")
	cfg := e.snapshotConfig("users")
	cfg.ProgressTable = setup.ProgressOn
	r := e.start(cfg)
	e.waitLog("snapshot: complete", 60*time.Second)
	st, err := state.Load(cfg.StateFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	n, _ := strconv.ParseUint(first, 10, 64)
	row := pglogrepl.LSN(n)
	if !st.ProgressKept || row == 0 {
		t.Fatalf("after the snapshot: progress_kept %v, first progress row %q; want true and the consistent point", st.ProgressKept, first)
	}
	if !strings.Contains(e.logs.String(), "consistent_point="+row.String()) {
		t.Fatalf("the first progress row %s is not the slot's consistent point:\n%s", row, tail(e.logs.String(), 2000))
	}
}

// A column added to the progress table (the refusal of a wrong shape
// invites it) is a program change that starts the table empty in
// Feldera, the other tables keeping their rows. The row's absence is
// then Feldera's own doing, not lost data: the start writes the row
// again at the slot's position and streams on, reading no table again.
// Judged by the row alone, it resnapshotted every table.
func TestProgress_ProgressTableChangedWritesTheRowAgain(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera+setup.ProgressDDL, func(fc *felderatest.Config) {
		fc.FaultTolerance = `{"model": "at_least_once", "checkpoint_interval_secs": 1}`
	})
	e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 100) g")
	cfg := e.snapshotConfig("users")
	cfg.ProgressTable = setup.ProgressOn
	r := e.start(cfg)
	e.waitSlot()
	e.exec("INSERT INTO users VALUES (500, 'streamed', 0)")
	e.waitConfirmed(e.currentLSN(), 60*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	changed := mixedFeldera + strings.Replace(setup.ProgressDDL, "lsn BIGINT NOT NULL", "lsn BIGINT NOT NULL,\n  note VARCHAR", 1)
	cleared, err := e.fel.ChangeProgram(changed)
	if err != nil || len(cleared) != 1 || cleared[0] != setup.ProgressTable {
		t.Fatalf("ChangeProgram: cleared %v, %v; want only %s", cleared, err, setup.ProgressTable)
	}
	r = e.start(cfg)
	e.waitSlot()
	e.exec("INSERT INTO users VALUES (600, 'after', 0)")
	e.waitConfirmed(e.currentLSN(), 60*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	logs := e.logs.String()
	if strings.Contains(logs, "startup: resnapshot") || !strings.Contains(logs, "the definition of the progress table changed") {
		t.Fatalf("the start did not write the row again without a resnapshot:\n%s", tail(logs, 3000))
	}
	e.assertEqual("users", "users")
	for id, n := range e.fel.InsertsByKey("users") {
		if n != 1 {
			t.Fatalf("users %s sent %d times: a table was read again", id, n)
		}
	}
	if len(e.fel.Rows(setup.ProgressTable)) != 1 {
		t.Fatalf("progress rows %v, want the slot's", e.fel.Rows(setup.ProgressTable))
	}
}

// A deployment that wrote its row keyed by the slot name alone (before
// rows were keyed by source) keeps it across the upgrade: the start
// takes the row over, not reading its absence under the new key as lost
// data, and the next row goes under the source's key.
func TestProgress_RowKeyedBySlotAloneIsTakenOver(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e, cfg := progressEnv(t)
	r := e.start(cfg)
	e.waitSlot()
	e.exec("INSERT INTO users VALUES (500, 'streamed', 0)")
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	row := progressRow(t, e)
	if row == 0 {
		t.Fatal("no progress row under the source's key")
	}
	// As the deployment before the upgrade left it.
	if err := e.fel.Delete("pgfeldera_progress", fmt.Sprintf(`{"slot": %q, "lsn": %d}`, e.progressKey(), uint64(row))); err != nil {
		t.Fatal(err)
	}
	if err := e.fel.Put("pgfeldera_progress", fmt.Sprintf(`{"slot": %q, "lsn": %d}`, e.slot, uint64(row))); err != nil {
		t.Fatal(err)
	}
	r = e.start(cfg)
	e.waitSlot()
	e.exec("INSERT INTO users VALUES (501, 'after the upgrade', 0)")
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	logs := e.logs.String()
	if strings.Contains(logs, "startup: resnapshot") || !strings.Contains(logs, "taking over the progress row keyed by the slot name alone") {
		t.Fatalf("the row keyed by the slot alone was not taken over:\n%s", tail(logs, 3000))
	}
	if now := progressRow(t, e); now <= row {
		t.Fatalf("the row under the source's key is %s, want past %s", now, row)
	}
	e.assertEqual("users", "users")
}

package crashtest_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/state"
)

// The phantom-row window (TestFailover_PhantomWindowWithoutStandbySlots)
// with the connector killed before the failover: the process that starts
// on the promoted server sent nothing, so only the progress row tells that
// Feldera holds transactions past the fork. With the table, the start
// reads it before clearing it, sees the fork before it and resnapshots:
// Feldera ends exact. Without the table (the unsafe variant), the start
// cannot tell, streams on, and Feldera keeps the phantom rows.
func TestFailover_ProgressRowShowsPhantomsToANewProcess(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	for _, off := range []bool{false, true} {
		t.Run(map[bool]string{false: "on", true: "off"}[off], func(t *testing.T) {
			t.Parallel()
			const phantoms = 50
			f := newFailoverWorldWith(t, false, func(c *felderatest.Config) {
				c.Tables = felderatest.MustParseDDL(felderaDDL + setup.ProgressDDL)
			})
			progress := "FELDERA_PROGRESS_TABLE=on"
			if off {
				progress = "FELDERA_PROGRESS_TABLE=off"
			}
			f.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 2000) g")
			p := f.start("PG_DSN="+f.multi, progress)
			if msg := f.caughtUp(p, 2*time.Minute); msg != "" {
				t.Fatal(msg)
			}
			f.waitSynced(90 * time.Second)
			f.pauseStandby()
			f.exec(fmt.Sprintf("INSERT INTO users SELECT g, 'phantom', 0 FROM generate_series(900001, %d) g", 900000+phantoms))
			if msg := f.caughtUp(p, time.Minute); msg != "" {
				t.Fatal(msg)
			}
			p.kill()
			f.failOver()
			p2 := f.start("PG_DSN="+f.multi, progress)
			if off {
				if !f.acked(p2, 2*time.Minute) {
					t.Fatalf("the start on the promoted server did not stream\n%s", f.log())
				}
				if held := phantomRows(f.world); held != phantoms {
					t.Fatalf("without the progress table Feldera holds %d phantom rows after the failover, want all %d: the test cannot see them", held, phantoms)
				}
				return
			}
			if msg := f.caughtUp(p2, 2*time.Minute); msg != "" {
				t.Fatalf("after the failover: %s\n%s", msg, f.log())
			}
			out := p2.output()
			i := strings.Index(out, "Feldera's progress row says")
			if i < 0 || !strings.Contains(out, "startup: resnapshot") {
				t.Fatalf("the start after the failover did not see the fork through the progress row\n%s", f.log())
			}
			line, _, _ := strings.Cut(out[i:], "\n")
			t.Logf("the start on the promoted server resnapshots: %s", line)
		})
	}
}

// phantomRows counts the rows of users Feldera holds that the phantom
// insert wrote.
func phantomRows(w *world) int {
	n := 0
	for _, r := range w.fel.Rows("users") {
		if strings.Contains(fmt.Sprint(r), "phantom") {
			n++
		}
	}
	return n
}

// A crash inside a Feldera transaction, then a failover to a standby that
// forked before the rows in it: the transaction the dead process left
// open holds rows the new primary never had, and the progress row (the
// last committed one) lies before the fork. The fence file records, before
// each POST into the transaction, the bound of its changes' positions
// (through); the start on the promoted server counts it as sent, sees the
// fork before it and resnapshots: no phantom stays. With the bound
// stripped (the unsafe variant: what a process had before it was
// recorded), the start joins and commits the transaction and streams on,
// and Feldera keeps the phantom rows.
func TestFailover_TransactionLeftOpenPastTheFork(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	for _, stripped := range []bool{false, true} {
		t.Run(map[bool]string{false: "through", true: "through_stripped_UNSAFE"}[stripped], func(t *testing.T) {
			t.Parallel()
			f := newFailoverWorldWith(t, false, func(c *felderatest.Config) {
				c.Tables = felderatest.MustParseDDL(felderaDDL + setup.ProgressDDL)
			})
			f.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 2000) g")
			p := f.start("PG_DSN="+f.multi, "CRASH_AT=after_post", "CRASH_AFTER_BATCHES=3")
			if msg := f.caughtUp(p, 2*time.Minute); msg != "" {
				t.Fatal(msg)
			}
			f.waitSynced(90 * time.Second)
			f.pauseStandby()
			f.exec("INSERT INTO users SELECT g, 'phantom', 0 FROM generate_series(900001, 901000) g") // ten batches, one source transaction
			if code := p.exited(60 * time.Second); code != 70 {
				t.Fatalf("the first run exited %d, want 70 at after_post inside the phantom transaction\n%s", code, f.log())
			}
			path := state.FencePath(filepath.Join(f.dir, "state.json"))
			fence, err := state.LoadFence(path)
			if err != nil || fence.Transaction == nil || fence.Transaction.Through == 0 {
				t.Fatalf("the fence file records no bound of the open transaction's changes: %+v, %v", fence, err)
			}
			if stripped {
				fence.Transaction.Through = 0
				if err := state.SaveFence(path, fence); err != nil {
					t.Fatal(err)
				}
			}
			f.failOver()
			p2 := f.start("PG_DSN=" + f.multi)
			if stripped {
				if !f.acked(p2, 2*time.Minute) {
					t.Fatalf("the start on the promoted server did not stream\n%s", f.log())
				}
				if phantomRows(f.world) == 0 {
					t.Fatal("without the bound Feldera holds no phantom row after the failover: the test cannot see them")
				}
				return
			}
			if msg := f.caughtUp(p2, 2*time.Minute); msg != "" {
				t.Fatalf("after the failover: %s\n%s", msg, f.log())
			}
			if n := phantomRows(f.world); n != 0 || !strings.Contains(p2.output(), "startup: resnapshot") {
				t.Fatalf("after the failover Feldera holds %d phantom rows (resnapshot: %v)\n%s", n, strings.Contains(p2.output(), "startup: resnapshot"), f.log())
			}
		})
	}
}

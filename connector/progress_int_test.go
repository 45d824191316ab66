package connector_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/setup"
)

// The progress row holds a position in the history of the slot that
// wrote it, and a new slot starts at its consistent point, which after a
// failover may lie below the row. Here the row is set far ahead (as a
// fork before it leaves it) and the slot dropped while pgfeldera is
// stopped: the resnapshot's new slot resets the row to its start, and a
// change after it arrives. Without the reset (the unsafe variant) the
// change is skipped as if Feldera held it, and lost.
func TestProgress_NewSlotResetsTheRow(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, unsafe := range []bool{false, true} {
		t.Run(map[bool]string{false: "reset", true: "keepRow"}[unsafe], func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera+setup.ProgressDDL)
			e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 100) g")
			cfg := e.snapshotConfig("users")
			r := e.start(cfg)
			e.waitSlot()
			e.exec("INSERT INTO users VALUES (500, 'streamed', 0)")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if rows := e.fel.Rows("pgfeldera_progress"); len(rows) != 1 {
				t.Fatalf("progress rows after the first run: %v", rows)
			}
			if err := e.fel.Put("pgfeldera_progress", fmt.Sprintf(`{"slot": %q, "lsn": %d}`, e.slot, uint64(1)<<40)); err != nil {
				t.Fatal(err)
			}
			e.dropSlot(e.slot)

			c := e.newConnector(cfg, e.client)
			if unsafe {
				connector.KeepProgressRow(c)
			}
			r = e.run(c)
			e.waitLog("snapshot: complete", 60*time.Second)
			e.waitSlot()
			e.exec("INSERT INTO users VALUES (501, 'after the new slot', 0)")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			got := e.fel.Len("users")
			if unsafe {
				if got != 101 {
					t.Fatalf("without the reset Feldera holds %d rows, want 101 (the change after the new slot skipped): the test cannot see the loss", got)
				}
				return
			}
			e.assertEqual("users", "users")
		})
	}
}

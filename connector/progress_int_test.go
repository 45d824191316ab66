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
// wrote it; a row of another history (a failover's old timeline) must
// skip nothing. Here the row is set far ahead and the slot dropped while
// pgfeldera is stopped, so the restart resnapshots into a new slot and
// then streams a change. Two guards keep that change: the row is cleared
// before a slot is created, and a row past the server's WAL end is not
// used. Each alone keeps it; without both (the unsafe variant) the change
// is skipped as if Feldera held it, and lost.
func TestProgress_RowOfAnotherHistorySkipsNothing(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, c := range []struct {
		name         string
		clear, guard bool
	}{{"clear", true, false}, {"walEnd", false, true}, {"neither", false, false}} {
		t.Run(c.name, func(t *testing.T) {
			e, cfg := progressEnv(t)
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
			if err := e.fel.Put("pgfeldera_progress", fmt.Sprintf(`{"slot": %q, "lsn": %d}`, e.progressKey(), uint64(1)<<40)); err != nil {
				t.Fatal(err)
			}
			e.dropSlot(e.slot)

			conn := e.newConnector(cfg, e.client)
			if !c.clear {
				connector.KeepProgressRow(conn)
			}
			if !c.guard {
				connector.TrustProgressRow(conn)
			}
			r = e.run(conn)
			e.waitLog("snapshot: complete", 60*time.Second)
			e.waitSlot()
			e.exec("INSERT INTO users VALUES (501, 'after the new slot', 0)")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if c.clear || c.guard {
				e.assertEqual("users", "users")
				return
			}
			if got := e.fel.Len("users"); got != 101 {
				t.Fatalf("without either guard Feldera holds %d rows, want 101 (the change after the new slot skipped): the test cannot see the loss", got)
			}
		})
	}
}

// progressEnv is a world whose pipeline declares the progress table, with
// 100 users, and the config of a snapshotting connector that requires the
// table.
func progressEnv(t *testing.T) (*env, connector.Config) {
	e := newEnv(t, mixedPG, mixedFeldera+setup.ProgressDDL)
	e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 100) g")
	cfg := e.snapshotConfig("users")
	cfg.ProgressTable = setup.ProgressOn
	return e, cfg
}

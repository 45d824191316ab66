package crashtest_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

// The crash matrix's Feldera axis: Feldera, not pgfeldera, restarts in
// place (same deployment, new incarnation) at three moments, under
// at_least_once (a restart restores the last checkpoint) and
// exactly_once (completed input is journaled). pgfeldera keeps running;
// every cell must end with the oracle exact.
//
//   - after_complete_before_checkpoint: a batch is complete in Feldera and
//     no checkpoint covers it. at_least_once loses it in Feldera; only a
//     replay from the slot (the gate never acknowledged it) brings it back.
//   - after_checkpoint: a checkpoint covers everything completed.
//   - post_in_flight: an ingress request is held by Feldera, unanswered.
func TestFelderaAxis(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	if testing.Short() {
		t.Skip("crash matrix: not in -short")
	}
	var rows []string
	for _, model := range []struct{ name, ft string }{
		{"at_least_once", `{"model": "at_least_once", "checkpoint_interval_secs": null}`},
		{"exactly_once", `{"model": "exactly_once", "checkpoint_interval_secs": null}`},
	} {
		for _, moment := range []string{"after_complete_before_checkpoint", "after_checkpoint", "post_in_flight"} {
			t.Run(model.name+"/"+moment, func(t *testing.T) {
				w := newWorld(t, func(c *felderatest.Config) { c.FaultTolerance = model.ft })
				w.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 300) g")
				p := w.start("FELDERA_CHECKPOINT_AFTER=1s")
				seeded(w, p, false)
				if msg := w.caughtUp(p, 60*time.Second); msg != "" {
					t.Fatalf("seeding: %s", msg)
				}
				asked := w.fel.CheckpointRequests() // the probe and the snapshot's
				inserted := 0
				switch moment {
				case "after_complete_before_checkpoint":
					before := len(w.fel.Requests())
					w.exec("INSERT INTO users SELECT g, 'completed', g FROM generate_series(1000, 1049) g")
					w.poll("the batch complete in Feldera", 30*time.Second, func() bool {
						return len(w.fel.Requests()) > before && len(w.fel.Rows("users")) == 350
					})
					inserted = 50
				case "after_checkpoint":
					w.exec("INSERT INTO users SELECT g, 'checkpointed', g FROM generate_series(1000, 1049) g")
					w.poll("the batch complete in Feldera", 30*time.Second, func() bool { return len(w.fel.Rows("users")) == 350 })
					if err := w.fel.Checkpoint(); err != nil {
						t.Fatal(err)
					}
					inserted = 50
				case "post_in_flight":
					w.fel.InjectFault(felderatest.Fault{Kind: felderatest.Hang, Path: "ingress", Count: 1})
					w.exec("INSERT INTO users SELECT g, 'in flight', g FROM generate_series(1000, 1049) g")
					w.waitHeld(1, 30*time.Second)
					inserted = 50
				}
				restart := time.Now()
				w.fel.RestartInPlace()
				if model.name == "at_least_once" && moment == "after_complete_before_checkpoint" {
					// The cell can see a loss: Feldera rolled back past the
					// completed batch, so only a replay from the slot brings
					// it back (a gate that acknowledged at completion loses
					// it: connector.TestDurability_InPlaceRestarts).
					if n := len(w.fel.Rows("users")); n != 300 {
						t.Fatalf("after the rollback Feldera holds %d rows, want the checkpoint's 300", n)
					}
				}
				w.fel.ClearFaults()
				w.exec("INSERT INTO users VALUES (5000, 'after the restart', 0)")
				msg := w.caughtUp(p, 60*time.Second)
				lost := w.lost()
				caught := time.Since(restart)
				if code := p.stop(t); code != 0 {
					t.Fatalf("pgfeldera exited %d on SIGTERM", code)
				}
				if msg != "" || lost != 0 {
					t.Fatalf("%s/%s: lost %d rows: %s", model.name, moment, lost, msg)
				}
				if model.name == "at_least_once" && w.fel.CheckpointRequests() == asked {
					// no periodic checkpoints here: only FELDERA_CHECKPOINT_AFTER
					// can have covered the batches
					t.Fatalf("caught up without asking for a checkpoint: the gate did not wait for one")
				}
				if strings.Contains(w.log(), "startup: resnapshot") {
					t.Fatalf("a restart under fault tolerance resnapshotted:\n%s", w.log())
				}
				rows = append(rows, fmt.Sprintf("| %s | %s | %d | 0 | %s |", model.name, moment, inserted, caught.Round(100*time.Millisecond)))
			})
		}
	}
	table := "| model | Feldera restarts in place | rows at stake | lost | restart → oracle exact |\n|---|---|---|---|---|\n" + strings.Join(rows, "\n") + "\n"
	t.Logf("Feldera axis:\n%s", table)
	if out := os.Getenv("FELDERA_AXIS_OUT"); out != "" {
		os.WriteFile(out, []byte(table), 0o644)
	}
}

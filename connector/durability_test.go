package connector_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// Feldera restarted in place (same deployment, new incarnation) three
// times at random moments under a steady writer, checkpointing every 2 s.
// Under at_least_once a restart restores the last checkpoint, so only the
// checkpoint gate keeps the oracle exact; under exactly_once completion is
// durable. The broken variant (at_least_once acknowledged at completion)
// must lose rows, or the test could not see a loss.
func TestDurability_InPlaceRestarts(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	cases := []struct {
		name, ft string
		gate     *delivery.Gate
		wantGate delivery.Gate
		loses    bool
	}{
		{"at_least_once", `{"model": "at_least_once", "checkpoint_interval_secs": 2}`, nil, delivery.GateCheckpoint, false},
		{"exactly_once", `{"model": "exactly_once", "checkpoint_interval_secs": 2}`, nil, delivery.GateComplete, false},
		{"at_least_once_acked_at_complete_BROKEN", `{"model": "at_least_once", "checkpoint_interval_secs": 2}`, ptr(delivery.GateComplete), delivery.GateComplete, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) {
				fc.FaultTolerance = c.ft
				fc.CheckpointEvery = 2 * time.Second
				if c.loses {
					// Acknowledged at completion, rows are lost by a
					// restart only if no checkpoint came between: on a
					// loaded machine an acknowledgement can take longer
					// than 2 s to show, so the broken variant's
					// checkpoints are far apart.
					fc.CheckpointEvery = time.Minute
				}
			})
			e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 500) g")
			cfg := e.snapshotConfig("users,public.items:catalog_items")
			conn := e.newConnector(cfg, e.client)
			if c.gate != nil {
				connector.SetGate(conn, *c.gate)
			}
			e.run(conn)
			e.waitSlot()
			if got := conn.Gate(); got != c.wantGate {
				t.Fatalf("gate %s, want %s", got, c.wantGate)
			}
			w := e.startWriter("users", 100000)
			if c.wantGate == delivery.GateCheckpoint {
				e.poll("completed work waiting for a checkpoint", 10*time.Second, func() bool { return conn.CheckpointWait() > 0 })
			}
			seed := testSeed(t, "DURABILITY_SEED")
			r := rand.New(rand.NewPCG(seed, 7))
			for i := 0; i < 3; i++ {
				// a random moment, 0.5–3 s in: before or after a checkpoint
				time.Sleep(time.Duration(500+r.IntN(2500)) * time.Millisecond)
				if c.loses {
					// The broken variant restarts just after an
					// acknowledgement moved: rows acknowledged at
					// completion that no checkpoint covers yet (unless one
					// landed in these few milliseconds, at most one 2 s
					// interval in about forty, on all three restarts).
					at := e.confirmed()
					e.poll("an acknowledgement", 30*time.Second, func() bool { return e.confirmed() > at })
				}
				before := strings.Count(e.logs.String(), "replaying from the slot")
				e.fel.RestartInPlace()
				e.poll("the restart noticed", 30*time.Second, func() bool {
					return strings.Count(e.logs.String(), "replaying from the slot") > before || strings.Count(e.logs.String(), "PipelineRestarted") > 0
				})
			}
			last := w.halt()
			e.execOwn(fmt.Sprintf("UPDATE users SET score = -1 WHERE id = %d", last)) // one more commit after the writer
			e.waitConfirmed(e.currentLSN(), 60*time.Second)
			d := e.diff("users", "users")
			if c.loses {
				if d == "" {
					t.Fatalf("acknowledging at completion under at_least_once lost nothing: the test cannot see a loss")
				}
				t.Logf("broken gate: the oracle sees the loss: %s", firstLine(d))
				return
			}
			if d != "" {
				t.Fatalf("lost or extra rows after three in-place restarts: %s\n%s", d, tail(e.logs.String(), 3000))
			}
			if strings.Contains(e.logs.String(), "startup: resnapshot") {
				t.Fatalf("a restart under fault tolerance resnapshotted:\n%s", tail(e.logs.String(), 3000))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// testSeed is a random seed, logged, or the one the variable name holds
// (to reproduce a failure).
func testSeed(t *testing.T, name string) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(name); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", name, v, err)
		}
	}
	t.Logf("%s=%d", name, seed)
	return seed
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// A restart in place while nothing is in flight is noticed by the
// incarnation alone: without fault tolerance the tables are resnapshotted
// (the deployment_id did not change, so only the incarnation tells);
// with it the session replays from the slot.
func TestDurability_IdleRestartInPlaceNoticed(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, c := range []struct{ name, ft, want string }{
		{"none", "", "startup: resnapshot"},
		{"at_least_once", `{"model": "at_least_once", "checkpoint_interval_secs": 1}`, "replaying from the slot"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) { fc.FaultTolerance = c.ft })
			e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 300) g")
			e.start(e.snapshotConfig("users,public.items:catalog_items"))
			e.waitLog("session: streaming", 30*time.Second)
			e.eventuallyEqual("users", "users", 30*time.Second)
			e.fel.RestartInPlace() // nothing outstanding: no token can fail
			e.waitLog(c.want, 30*time.Second)
			e.eventuallyEqual("users", "users", 60*time.Second)
			if c.name == "none" && !strings.Contains(e.logs.String(), "restarted in place") {
				t.Fatalf("the resnapshot does not say why:\n%s", tail(e.logs.String(), 2000))
			}
		})
	}
}

// A pipeline that reports fault tolerance but cannot checkpoint (Feldera's
// OSS edition answers POST /checkpoint with 501) is refused: it cannot
// keep what it claims to keep.
func TestDurability_FaultToleranceWithoutCheckpointsRefused(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) {
		fc.FaultTolerance = `{"model": "at_least_once"}`
		fc.NoCheckpoints = true
	})
	r := e.start(e.config("users,public.items:catalog_items"))
	var err error
	select {
	case err = <-r.done:
		r.done <- err // for the cleanup's stop
	case <-time.After(30 * time.Second):
		t.Fatal("the connector kept running")
	}
	if err == nil || !strings.Contains(err.Error(), "501 EnterpriseFeature") || !strings.Contains(err.Error(), "at_least_once") {
		t.Fatalf("want a refusal naming the model and the 501, got %v", err)
	}
	var fe *connector.FatalError
	if !errors.As(err, &fe) {
		t.Fatalf("the refusal must be fatal (no retry loop): %v", err)
	}
}

// A redeploy with its storage cleared restored nothing: the pipeline has
// no checkpoint at all, and the start is a resnapshot, not a replay. The
// double is first shown to hold no rows afterwards, so the test can see
// the loss a stream-on would leave. (A program change keeps what the
// stop's checkpoint holds except the tables it modified:
// TestRestore_ProgramChangeReadsTheModifiedTable.)
func TestDurability_RedeploysThatLoseStateResnapshot(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) {
		fc.FaultTolerance = `{"model": "exactly_once", "checkpoint_interval_secs": null}`
	})
	e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 200) g")
	e.start(e.snapshotConfig("users,public.items:catalog_items"))
	e.waitLog("session: streaming", 30*time.Second)
	e.exec("INSERT INTO users SELECT g, 'streamed', g FROM generate_series(1000, 1099) g")
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	e.assertEqual("users", "users")
	e.fel.RedeployCleared()
	if n := len(e.fel.Rows("users")); n != 0 {
		t.Fatalf("the double kept %d rows over the redeploy: the test could not see a loss", n)
	}
	e.exec("INSERT INTO users VALUES (5000, 'after', 0)")
	e.waitLog("startup: resnapshot", 30*time.Second)
	e.eventuallyEqual("users", "users", 60*time.Second)
}

// noStepSink answers completions without their step, like a Feldera
// whose /completion_status has no "step".
type noStepSink struct{ *feldera.Client }

func (n noStepSink) WaitCompleteStep(ctx context.Context, token string) (uint64, error) {
	_, err := n.Client.WaitCompleteStep(ctx, token)
	return 0, err
}

func (n noStepSink) CompletionStep(ctx context.Context, token string) (bool, uint64, error) {
	done, _, err := n.Client.CompletionStep(ctx, token)
	return done, 0, err
}

// Under at_least_once a completion without its step cannot be shown
// covered by a checkpoint: the connector stops, fatally, and acknowledges
// nothing it sent.
func TestDurability_CompletionWithoutStepRefusedUnderAtLeastOnce(t *testing.T) {
	pgcluster.AnyVersion(t)
	// Not parallel: it checks that the slot did not move at all, and on a
	// shared cluster an idle session acknowledges other tests' WAL.
	e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) {
		fc.FaultTolerance = `{"model": "at_least_once", "checkpoint_interval_secs": 1}`
	})
	r := e.startWith(e.config("users,public.items:catalog_items"), noStepSink{e.client})
	e.waitSlot()
	before := e.confirmed()
	e.exec("INSERT INTO users VALUES (1, 'x', 1)")
	var err error
	select {
	case err = <-r.done:
		r.done <- err // for the cleanup's stop
	case <-time.After(30 * time.Second):
		t.Fatal("the connector kept running")
	}
	var fe *connector.FatalError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "without its step") {
		t.Fatalf("want a fatal refusal naming the missing step, got %v", err)
	}
	if got := e.confirmed(); got != before {
		t.Fatalf("the slot moved from %s to %s", before, got)
	}
}

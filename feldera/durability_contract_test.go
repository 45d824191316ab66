package feldera_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

// The durability surface of the double, as the client reads it:
// completion steps, /checkpoints coverage, /checkpoint (501 without fault
// tolerance), /checkpoint_status, /stats incarnation, and what an in-place
// restart keeps under each model.

func TestContract_CompletionStepsAndCheckpoints(t *testing.T) {
	s, c := newServer(t, func(cfg *felderatest.Config) {
		cfg.FaultTolerance = `{"model": "at_least_once", "checkpoint_interval_secs": null}`
	})
	tok1, _ := c.Ingress(ctx(t), "users", []byte(`{"insert": {"id": 1, "tag": "a"}}`+"\n"))
	step1, err := c.WaitCompleteStep(ctx(t), tok1)
	if err != nil || step1 == 0 {
		t.Fatalf("first token: step %d, %v", step1, err)
	}
	tok2, _ := c.Ingress(ctx(t), "events", []byte(`{"insert": {"k": 1, "v": "x"}}`+"\n"))
	step2, err := c.WaitCompleteStep(ctx(t), tok2)
	if err != nil || step2 <= step1 {
		t.Fatalf("a later token completes at a later step: %d then %d (%v)", step1, step2, err)
	}
	if cps, err := c.Checkpoints(ctx(t)); err != nil || len(cps) != 0 {
		t.Fatalf("no checkpoint yet (interval null): %+v %v", cps, err)
	}
	// total_initiated_steps counts the step that completed tok2: a
	// checkpoint of that many steps holds it.
	st, err := c.Stats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.GlobalMetrics.TotalInitiatedSteps < step2 {
		t.Fatalf("total_initiated_steps %d after a completion at step %d", st.GlobalMetrics.TotalInitiatedSteps, step2)
	}
	seq, err := c.RequestCheckpoint(ctx(t))
	if err != nil || seq != 1 {
		t.Fatalf("POST /checkpoint: seq %d, %v", seq, err)
	}
	cps, err := c.Checkpoints(ctx(t))
	if err != nil || len(cps) != 1 || cps[0].Steps < step2 || cps[0].UUID == "" {
		t.Fatalf("the checkpoint covers both steps: %+v %v (step %d)", cps, err, step2)
	}
	if code, body := raw(t, s, "GET", "/v0/pipelines/p1/checkpoint_status", ""); code != 200 || body != "{\"failure\":null,\"success\":1}\n" {
		t.Fatalf("checkpoint_status %d %s", code, body)
	}
	if code, body := raw(t, s, "GET", "/v0/pipelines/p1/checkpoint_status?incarnation_uuid=00000000-0000-4000-8000-000000000000", ""); code != 400 || !strings.Contains(body, "IncarnationUuidMismatch") {
		t.Fatalf("a stale incarnation: %d %s", code, body)
	}
	st, err = c.Stats(ctx(t))
	if err != nil || st.GlobalMetrics.IncarnationUUID != s.Incarnation() || st.GlobalMetrics.State != "Running" {
		t.Fatalf("stats %+v %v", st, err)
	}
}

func TestContract_CheckpointRefusedWithoutFaultTolerance(t *testing.T) {
	for name, mod := range map[string]func(*felderatest.Config){
		"none":                 nil,
		"oss_with_ft_reported": func(cfg *felderatest.Config) { cfg.FaultTolerance = "{}"; cfg.NoCheckpoints = true },
	} {
		t.Run(name, func(t *testing.T) {
			_, c := newServer(t, mod)
			_, err := c.RequestCheckpoint(ctx(t))
			if !feldera.IsCheckpointUnsupported(err) || feldera.IsTransient(err) {
				t.Fatalf("want 501 EnterpriseFeature, got %v", err)
			}
		})
	}
}

func TestContract_PeriodicCheckpoints(t *testing.T) {
	_, c := newServer(t, func(cfg *felderatest.Config) { cfg.FaultTolerance = "{}"; cfg.CheckpointEvery = 50 * time.Millisecond })
	push(t, c, "users", `{"insert": {"id": 1, "tag": "a"}}`)
	deadline := time.Now().Add(5 * time.Second)
	for {
		cps, err := c.Checkpoints(ctx(t))
		if err == nil && len(cps) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no periodic checkpoints: %+v %v", cps, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// What a restart in place keeps: none nothing, at_least_once the last
// checkpoint, exactly_once everything completed. The deployment stays,
// the incarnation changes, old tokens answer 410.
func TestContract_RestartInPlaceByModel(t *testing.T) {
	for _, m := range []struct {
		name, ft string
		want     int // rows of users after the restart
	}{
		{"none", "", 0},
		{"at_least_once", `{"model": "at_least_once", "checkpoint_interval_secs": null}`, 1},
		{"exactly_once", `{"model": "exactly_once"}`, 2},
	} {
		t.Run(m.name, func(t *testing.T) {
			s, c := newServer(t, func(cfg *felderatest.Config) { cfg.FaultTolerance = m.ft })
			push(t, c, "users", `{"insert": {"id": 1, "tag": "before the checkpoint"}}`)
			if m.ft != "" {
				if _, err := c.RequestCheckpoint(ctx(t)); err != nil {
					t.Fatal(err)
				}
			}
			tok, _ := c.Ingress(ctx(t), "users", []byte(`{"insert": {"id": 2, "tag": "after it, completed"}}`+"\n"))
			if err := c.WaitComplete(ctx(t), tok); err != nil {
				t.Fatal(err)
			}
			dep, inc := s.DeploymentID(), s.Incarnation()
			s.RestartInPlace()
			if s.DeploymentID() != dep || s.Incarnation() == inc {
				t.Fatalf("deployment %s → %s, incarnation %s → %s", dep, s.DeploymentID(), inc, s.Incarnation())
			}
			if got := len(s.Rows("users")); got != m.want {
				t.Fatalf("%d rows after an in-place restart, want %d", got, m.want)
			}
			if _, err := c.Completion(ctx(t), tok); !feldera.IsRestarted(err) {
				t.Fatalf("an old token after the restart: %v", err)
			}
			if m.name == "at_least_once" {
				cps, _ := c.Checkpoints(ctx(t))
				if len(cps) == 0 || cps[len(cps)-1].Steps != s.Steps() {
					t.Fatalf("the restored checkpoint is the newest and matches the step count: %+v, steps %d", cps, s.Steps())
				}
			}
		})
	}
}

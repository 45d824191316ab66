package setup

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// checkpointer is a Feldera's checkpoint API that counts the probes.
type checkpointer struct {
	cps      []feldera.Checkpoint
	probeErr error
	probes   int
}

func (f *checkpointer) Checkpoints(context.Context) ([]feldera.Checkpoint, error) { return f.cps, nil }

func (f *checkpointer) RequestCheckpoint(context.Context) (uint64, error) {
	f.probes++
	return 0, f.probeErr
}

// The gate follows the model and the ack mode; under fault tolerance the
// session's checkpoints are listed and POST /checkpoint is tried once, a
// 501 being fatal.
func TestChooseGate(t *testing.T) {
	forced := delivery.GateCheckpoint
	unsupported := &feldera.APIError{Op: "checkpoint", StatusCode: http.StatusNotImplemented, Code: "EnterpriseFeature"}
	for _, tc := range []struct {
		name     string
		model    feldera.FTModel
		rules    GateRules
		probeErr error
		gate     delivery.Gate
		why      string // in why, or in the error
		probes   int
		probed   bool
		fatal    bool
	}{
		{"none", feldera.FTNone, GateRules{}, nil, delivery.GateComplete, "no fault tolerance", 0, false, false},
		{"at_least_once", feldera.FTAtLeastOnce, GateRules{}, nil, delivery.GateCheckpoint, "at_least_once:", 1, true, false},
		{"exactly_once", feldera.FTExactlyOnce, GateRules{}, nil, delivery.GateComplete, "exactly_once:", 1, true, false},
		{"probed before", feldera.FTAtLeastOnce, GateRules{Probed: true}, nil, delivery.GateCheckpoint, "at_least_once:", 0, true, false},
		{"accepted", feldera.FTAtLeastOnce, GateRules{AckAccepted: true}, nil, delivery.GateComplete, "FELDERA_ACK_MODE=accepted", 1, true, false},
		{"forced", feldera.FTNone, GateRules{Forced: &forced}, nil, delivery.GateCheckpoint, "forced by a test", 0, false, false},
		{"501", feldera.FTAtLeastOnce, GateRules{}, unsupported, delivery.GateCheckpoint, "answers POST /checkpoint with 501 EnterpriseFeature", 1, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &checkpointer{cps: []feldera.Checkpoint{{UUID: "A"}}, probeErr: tc.probeErr}
			p := &Plan{Model: tc.model, FaultTolerant: tc.model.FaultTolerant()}
			why, probed, err := ChooseGate(context.Background(), api, p, tc.rules)
			if err != nil {
				why = err.Error()
			}
			if (err != nil) != tc.fatal || err != nil && !fatal.Is(err) {
				t.Fatalf("err = %v, want fatal %v", err, tc.fatal)
			}
			if p.Gate != tc.gate || !strings.Contains(why, tc.why) || api.probes != tc.probes || probed != tc.probed {
				t.Errorf("gate %s, why %q, %d probes, probed %v; want %s, %q, %d, %v", p.Gate, why, api.probes, probed, tc.gate, tc.why, tc.probes, tc.probed)
			}
			if ft := p.FaultTolerant; ft && (p.NoCheckpoint || !p.CkptBefore["A"]) || !ft && p.CkptBefore != nil {
				t.Errorf("checkpoints before the session: %v (none: %v)", p.CkptBefore, p.NoCheckpoint)
			}
		})
	}
}

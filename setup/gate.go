package setup

import (
	"context"
	"fmt"

	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// Checkpointer lists the pipeline's checkpoints and asks for one.
// *feldera.Client satisfies it.
type Checkpointer interface {
	// Checkpoints lists the pipeline's checkpoints, oldest first.
	Checkpoints(ctx context.Context) ([]feldera.Checkpoint, error)
	// RequestCheckpoint asks for a checkpoint (POST /checkpoint).
	RequestCheckpoint(ctx context.Context) (uint64, error)
}

// GateRules is what the choice of the ack gate takes besides the plan.
type GateRules struct {
	AckAccepted bool           // FELDERA_ACK_MODE=accepted
	Forced      *delivery.Gate // a test's gate, whatever the model; nil in production
	Probed      bool           // POST /checkpoint was tried once already (by an earlier session)
}

// ChooseGate picks when a completed batch may be acknowledged, from the
// fault-tolerance model (DURABILITY.md §2.3):
//
//   - none: at completion. Feldera cannot keep anything across a restart;
//     a restart is noticed (a new incarnation or deployment) and the tables
//     are resnapshotted with retraction.
//   - exactly_once: at completion. Feldera journals each step's input
//     before the step's outputs are pushed, and completion waits for them,
//     so a complete token is replayed by a restart.
//   - at_least_once: once a checkpoint covers the completing step. A
//     restart restores the last checkpoint and nothing after it.
//
// Under fault tolerance, POST /checkpoint is tried once: a 501 means this
// Feldera cannot checkpoint, so the model it reports cannot hold.
//
// It sets p.Gate and, under fault tolerance, the checkpoints the session
// begins with, and returns why (for the log) and whether POST /checkpoint
// has been tried, now or before.
func ChooseGate(ctx context.Context, api Checkpointer, p *Plan, r GateRules) (why string, probed bool, err error) {
	p.Gate = delivery.GateFor(p.Model, r.AckAccepted)
	why = "no fault tolerance: a Feldera restart loses its state and is resnapshotted"
	switch {
	case r.AckAccepted:
		why = "FELDERA_ACK_MODE=accepted: acknowledged on HTTP 200 (unsafe)"
	case p.Model == feldera.FTAtLeastOnce:
		why = "at_least_once: a restart restores the last checkpoint, so a batch is acknowledged once a checkpoint covers its step"
	case p.Model == feldera.FTExactlyOnce:
		why = "exactly_once: a completed step is journaled and replayed by a restart"
	}
	if r.Forced != nil {
		p.Gate, why = *r.Forced, "forced by a test"
	}
	if p.FaultTolerant {
		cps, err := api.Checkpoints(ctx)
		if err != nil && !feldera.IsCheckpointUnsupported(err) {
			return "", r.Probed, fmt.Errorf("read feldera checkpoints: %w", err)
		}
		p.NoCheckpoint = len(cps) == 0
		p.Checkpoints, p.CkptBefore = cps, map[string]bool{}
		for _, cp := range cps {
			p.CkptBefore[cp.UUID] = true
		}
	}
	if p.FaultTolerant && !r.Probed {
		if _, err := api.RequestCheckpoint(ctx); err != nil {
			if feldera.IsCheckpointUnsupported(err) {
				return "", r.Probed, fatal.Wrap(fmt.Errorf("feldera pipeline reports fault tolerance (%s) but answers POST /checkpoint with 501 EnterpriseFeature: this Feldera cannot checkpoint, so it cannot keep the state it reports it keeps; use an Enterprise Feldera, or remove fault_tolerance from the runtime configuration (pgfeldera then resnapshots after each Feldera restart)", p.Model))
			}
			return "", r.Probed, fmt.Errorf("feldera: probe POST /checkpoint: %w", err)
		}
		r.Probed = true
	}
	return why, r.Probed, nil
}

package connector

import (
	"context"
	"fmt"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/setup"
)

// prepare runs the startup checks (setup.Prepare) and, for a run, reads
// the Feldera process it feeds and chooses the ack gate.
func (c *Connector) prepare(ctx context.Context, mode setup.Mode) (*setup.Plan, error) {
	p, err := setup.Prepare(ctx, c.setupConfig(), c.sink, mode)
	if err != nil || mode != setup.ForRun {
		return p, err
	}
	st, err := c.sink.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("read feldera pipeline stats: %w", err)
	}
	p.Incarnation = st.GlobalMetrics.IncarnationUUID
	if len(st.Outputs) == 0 && !c.warnedOutputs {
		c.warnedOutputs = true
		c.logger.Warn("feldera pipeline has no output connectors: Feldera may then report a step complete before it finished (feldera#7169), so a read right after completion (the COUNT(*) checks of a TRUNCATE or resnapshot) can briefly see old rows and fail the check, which is retried; acknowledgements under at_least_once still wait for a checkpoint")
	}
	if err := c.chooseGate(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

// setupConfig is what the startup checks need of the configuration.
func (c *Connector) setupConfig() setup.Config {
	return setup.Config{
		DSN: c.cfg.DSN, Slot: c.cfg.Slot, Publication: c.cfg.Publication, Tables: c.cfg.Tables,
		RequirePrimaryKey: c.cfg.RequirePrimaryKey, CheckpointWAL: c.cfg.CheckpointWAL,
		Options: c.decodeOptions, IgnoreFilter: c.test.ignoreFilter, Logger: c.logger,
	}
}

// chooseGate picks when a completed batch may be acknowledged, from the
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
func (c *Connector) chooseGate(ctx context.Context, p *setup.Plan) error {
	p.Gate = GateFor(p.Model, c.cfg.AckMode)
	why := "no fault tolerance: a Feldera restart loses its state and is resnapshotted"
	switch {
	case c.cfg.AckMode == AckAccepted:
		why = "FELDERA_ACK_MODE=accepted: acknowledged on HTTP 200 (unsafe)"
	case p.Model == feldera.FTAtLeastOnce:
		why = "at_least_once: a restart restores the last checkpoint, so a batch is acknowledged once a checkpoint covers its step"
	case p.Model == feldera.FTExactlyOnce:
		why = "exactly_once: a completed step is journaled and replayed by a restart"
	}
	if c.test.forceGate != nil {
		p.Gate, why = *c.test.forceGate, "forced by a test"
	}
	if p.FaultTolerant {
		cps, err := c.sink.Checkpoints(ctx)
		if err != nil && !feldera.IsCheckpointUnsupported(err) {
			return fmt.Errorf("read feldera checkpoints: %w", err)
		}
		p.NoCheckpoint = len(cps) == 0
		p.Checkpoints, p.CkptBefore = cps, map[string]bool{}
		for _, cp := range cps {
			p.CkptBefore[cp.UUID] = true
		}
	}
	if p.FaultTolerant && !c.probed {
		if _, err := c.sink.RequestCheckpoint(ctx); err != nil {
			if feldera.IsCheckpointUnsupported(err) {
				return fatal.Wrap(fmt.Errorf("feldera pipeline reports fault tolerance (%s) but answers POST /checkpoint with 501 EnterpriseFeature: this Feldera cannot checkpoint, so it cannot keep the state it reports it keeps; use an Enterprise Feldera, or remove fault_tolerance from the runtime configuration (pgfeldera then resnapshots after each Feldera restart)", p.Model))
			}
			return fmt.Errorf("feldera: probe POST /checkpoint: %w", err)
		}
		c.probed = true
	}
	c.gate.Store(int32(p.Gate))
	c.logger.Info("ack gate chosen", "gate", p.Gate.String(), "model", p.Model, "why", why,
		"deployment_id", p.DeploymentID, "incarnation_uuid", p.Incarnation, "checkpoint_wal", p.WALBudget)
	return nil
}

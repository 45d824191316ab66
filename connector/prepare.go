package connector

import (
	"context"
	"fmt"

	"github.com/pgfeldera/pgfeldera/delivery"
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
	sc := setupConfig(c.cfg, c.test.IgnoreFilter, c.nulled)
	sc.Logger = c.logger
	return sc
}

// chooseGate chooses the ack gate (setup.ChooseGate), keeps whether
// POST /checkpoint was tried, and publishes the gate.
func (c *Connector) chooseGate(ctx context.Context, p *setup.Plan) error {
	why, probed, err := setup.ChooseGate(ctx, c.sink, p, setup.GateRules{
		AckAccepted: c.cfg.AckMode == AckAccepted, Forced: c.forcedGate(), Probed: c.probed})
	if err != nil {
		return err
	}
	c.probed = probed
	c.gate.Store(int32(p.Gate))
	c.logger.Info("ack gate chosen", "gate", p.Gate.String(), "model", p.Model, "why", why,
		"deployment_id", p.DeploymentID, "incarnation_uuid", p.Incarnation, "checkpoint_wal", p.WALBudget)
	return nil
}

// forcedGate is the gate a test forced (testhook.Hooks.ForceGate), nil
// when none.
func (c *Connector) forcedGate() *delivery.Gate {
	if c.test.ForceGate == nil {
		return nil
	}
	g := delivery.Gate(*c.test.ForceGate)
	return &g
}

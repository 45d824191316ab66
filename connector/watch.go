package connector

import (
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/setup"
)

// newWatcher is a watcher of the pipeline p describes (delivery.Watcher):
// it keeps its own copy of what it follows.
func (c *Connector) newWatcher(p *setup.Plan) *delivery.Watcher {
	return &delivery.Watcher{
		API: c.sink, CP: &c.cp,
		P: delivery.Watched{DeploymentID: p.DeploymentID, Incarnation: p.Incarnation, FaultTolerant: p.FaultTolerant,
			Model: p.Model, Gate: p.Gate, CkptBefore: p.CkptBefore, WALBudget: p.WALBudget},
		Never: c.cfg.SnapshotMode == SnapshotNever, CheckpointAfter: c.cfg.CheckpointAfter,
		TrustCheckpoints: c.test.TrustCheckpoints, Logger: c.logger,
	}
}

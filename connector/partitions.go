package connector

import (
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/state"
)

// reconcile checks what the restarted Feldera and the catalog hold
// against the state (setup.Reconcile), under this connector's rules, and
// publishes the gate a journal gap moved.
func (c *Connector) reconcile(p *setup.Plan, st *state.State) (string, error) {
	before := p.Gate
	why, err := setup.Reconcile(p, st, setup.Rules{StateFile: c.cfg.StateFile, Logger: c.logger,
		TrustRestores: c.test.trustRestores, IgnoreShape: c.test.ignoreShape, GateForced: c.test.forceGate != nil})
	if p.Gate != before {
		c.gate.Store(int32(p.Gate))
	}
	return why, err
}

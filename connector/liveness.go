package connector

import (
	"time"

	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/setup"
)

// replicationTimeout is the session's liveness timeout (0: none, a test
// hook's unsafe variant).
func (c *Connector) replicationTimeout(p *setup.Plan) time.Duration {
	if c.test.NoHeartbeat {
		return 0
	}
	return replconn.Timeout(c.cfg.ReplicationTimeout, p.WALTimeout)
}

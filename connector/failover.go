package connector

import "github.com/pgfeldera/pgfeldera/failover"

// failoverChecker checks a session's server for failover (package
// failover). The first session of the process may refuse an empty
// synchronized_standby_slots under PG_SLOT_FAILOVER=on; later ones,
// after a failover, only warn.
func (c *Connector) failoverChecker() *failover.Checker {
	return &failover.Checker{DSN: c.cfg.DSN, Slot: c.cfg.Slot, Setting: c.cfg.SlotFailover,
		First: c.stats.Sessions.Load() == 0, Logger: c.logger}
}

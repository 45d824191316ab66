package connector

import "github.com/pgfeldera/pgfeldera/failover"

// Slot failover settings (PG_SLOT_FAILOVER; failover.Auto, On, Off).
const (
	FailoverAuto = failover.Auto
	FailoverOn   = failover.On
	FailoverOff  = failover.Off
)

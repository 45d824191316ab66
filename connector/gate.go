package connector

import (
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
)

// Gate says when a batch Feldera completed may be acknowledged to
// Postgres (delivery.Gate).
type Gate = delivery.Gate

// The gates (delivery.GateComplete, delivery.GateCheckpoint).
const (
	GateComplete   = delivery.GateComplete
	GateCheckpoint = delivery.GateCheckpoint
)

// GateFor is the gate for a fault-tolerance model under an ack mode.
func GateFor(model feldera.FTModel, ackMode string) Gate {
	return delivery.GateFor(model, ackMode == AckAccepted)
}

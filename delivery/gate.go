package delivery

import "github.com/pgfeldera/pgfeldera/feldera"

// Gate says when a batch Feldera completed may be acknowledged to Postgres:
// when it is durable in Feldera, which depends on the pipeline's
// fault-tolerance model (DURABILITY.md §2.3).
type Gate int

const (
	// GateComplete acknowledges at completion. Right without fault
	// tolerance (a Feldera restart loses everything anyway, and pgfeldera
	// resnapshots) and under exactly_once (Feldera journals each step
	// before it completes).
	GateComplete Gate = iota
	// GateCheckpoint acknowledges once a checkpoint covers the completing
	// step: under at_least_once a restart restores the last checkpoint and
	// loses what completed after it.
	GateCheckpoint
)

// GateFor is the gate for a fault-tolerance model; accepted is the unsafe
// ack mode that acknowledges at Feldera's 200 and waits for nothing.
func GateFor(model feldera.FTModel, accepted bool) Gate {
	if model == feldera.FTAtLeastOnce && !accepted {
		return GateCheckpoint
	}
	return GateComplete
}

func (g Gate) String() string {
	if g == GateCheckpoint {
		return "checkpoint"
	}
	return "complete"
}

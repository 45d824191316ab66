package connector

import "github.com/pgfeldera/pgfeldera/stage"

// Stage is a step on a source transaction's way from its COMMIT in
// Postgres to the slot's acknowledgement (stage.Stage).
type Stage = stage.Stage

// The stages (stage.Sent, stage.Complete, stage.Durable, stage.Acked).
const (
	StageSent     = stage.Sent
	StageComplete = stage.Complete
	StageDurable  = stage.Durable
	StageAcked    = stage.Acked
)

// Stages are the stage names, in order (stage.Names).
func Stages() []string { return stage.Names() }

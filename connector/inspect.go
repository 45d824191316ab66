package connector

import (
	"context"

	"github.com/pgfeldera/pgfeldera/inspect"
)

// CheckReport is what check found (inspect.CheckReport).
type CheckReport = inspect.CheckReport

// Verdict is the comparison of one mapped table (inspect.Verdict).
type Verdict = inspect.Verdict

// Check looks at every prerequisite of a run at once and changes nothing
// (inspect.Check), under cfg with its defaults.
func Check(ctx context.Context, cfg Config, sink Sink) (*CheckReport, error) {
	c, err := New(cfg, sink)
	if err != nil {
		return nil, err
	}
	return inspect.Check(ctx, c.setupConfig(), inspect.CheckOptions{StateFile: c.cfg.StateFile,
		SlotFailover: c.cfg.SlotFailover, AckAccepted: c.cfg.AckMode == AckAccepted}, c.sink)
}

// Verify compares each mapped table in Postgres and in Feldera
// (inspect.Verify), under cfg with its defaults.
func Verify(ctx context.Context, cfg Config, sink Sink, maxDiffs int) ([]Verdict, error) {
	c, err := New(cfg, sink)
	if err != nil {
		return nil, err
	}
	return inspect.Verify(ctx, c.setupConfig(), c.sink, maxDiffs)
}

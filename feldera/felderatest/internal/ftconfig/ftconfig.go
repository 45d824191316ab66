package ftconfig

import (
	"encoding/json"
	"time"
)

// Setting is the fault-tolerance part of felderatest.Config.
type Setting struct {
	FaultTolerance  string        // runtime_config.fault_tolerance as JSON; "" when not given
	FaultTolerant   bool          // when FaultTolerance is "": at_least_once
	CheckpointEvery time.Duration // when > 0, overrides checkpoint_interval_secs
}

// Tolerant reports whether completed state survives a restart
// (felderatest.Server.Restart).
func (f Setting) Tolerant() bool {
	if f.FaultTolerance == "" {
		return f.FaultTolerant
	}
	// Read independently of the client's parser, so that a bug there
	// cannot hide in the double: Feldera's FtConfig rules.
	var v any
	if json.Unmarshal([]byte(f.FaultTolerance), &v) != nil {
		return false
	}
	switch x := v.(type) {
	case string:
		return x == "initial_state" || x == "latest_checkpoint"
	case map[string]any:
		m, ok := x["model"]
		if !ok {
			return true
		}
		name, _ := m.(string)
		return name == "at_least_once" || name == "exactly_once"
	}
	return false
}

// Model is the fault-tolerance model the double runs with, read with its
// own parser (not the client's).
func (f Setting) Model() string {
	if f.FaultTolerance == "" {
		if f.FaultTolerant {
			return "at_least_once"
		}
		return "none"
	}
	if !f.Tolerant() {
		return "none"
	}
	var v map[string]any
	if json.Unmarshal([]byte(f.FaultTolerance), &v) == nil {
		if m, _ := v["model"].(string); m == "at_least_once" {
			return "at_least_once"
		}
	}
	return "exactly_once"
}

// Interval is CheckpointEvery, else the pipeline's
// checkpoint_interval_secs as Feldera reads it: default 60, clamped to
// 1..3600, null for none.
func (f Setting) Interval() time.Duration {
	if f.CheckpointEvery > 0 {
		return f.CheckpointEvery
	}
	secs := 60.0
	var v map[string]any
	if json.Unmarshal([]byte(f.FaultTolerance), &v) == nil {
		if raw, ok := v["checkpoint_interval_secs"]; ok {
			n, isNum := raw.(float64)
			if !isNum {
				return 0 // null: no periodic checkpoints
			}
			secs = min(max(n, 1), 3600)
		}
	}
	return time.Duration(secs * float64(time.Second))
}

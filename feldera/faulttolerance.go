package feldera

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// FTModel is a pipeline's fault-tolerance model: what survives a restart of
// the Feldera process.
type FTModel string

// Fault-tolerance models, as Feldera names them.
const (
	// FTNone: a restart loses the pipeline's state (OSS loses everything;
	// Enterprise keeps only a manual checkpoint).
	FTNone FTModel = "none"
	// FTAtLeastOnce: a restart returns to the last checkpoint; HTTP input
	// processed after it is gone, even if its token was complete.
	FTAtLeastOnce FTModel = "at_least_once"
	// FTExactlyOnce: input is journaled; a complete token survives a
	// restart (except after a program change).
	FTExactlyOnce FTModel = "exactly_once"
)

// FaultTolerant reports whether completed state survives a restart in some
// form (a checkpoint or the journal).
func (m FTModel) FaultTolerant() bool { return m == FTAtLeastOnce || m == FTExactlyOnce }

// FaultTolerance is runtime_config.fault_tolerance exactly as the pipeline
// reported it. Feldera's reading of it (feldera-types config.rs,
// deserialize_fault_tolerance and FtConfig) is:
//
//	absent or null                          → none
//	"initial_state" or "latest_checkpoint"  → exactly_once (legacy strings)
//	{} or an object without "model"         → exactly_once (the default model)
//	{"model": "none"} (any case)            → none
//	{"model": "at_least_once"|"exactly_once"} → that model
//
// Anything else is an error: a model pgfeldera does not know is not
// guessed at.
type FaultTolerance struct {
	raw json.RawMessage
}

// UnmarshalJSON keeps the raw value; Model interprets it.
func (f *FaultTolerance) UnmarshalJSON(b []byte) error {
	f.raw = append(json.RawMessage(nil), b...)
	return nil
}

// MarshalJSON writes the value back as it was read (null when absent).
func (f FaultTolerance) MarshalJSON() ([]byte, error) {
	if len(f.raw) == 0 {
		return []byte("null"), nil
	}
	return f.raw, nil
}

// Model interprets the value the way Feldera does (see FaultTolerance).
func (f *FaultTolerance) Model() (FTModel, error) {
	if f == nil {
		return FTNone, nil
	}
	raw := bytes.TrimSpace(f.raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return FTNone, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("runtime_config.fault_tolerance %s: %w", raw, err)
		}
		if s == "initial_state" || s == "latest_checkpoint" {
			return FTExactlyOnce, nil
		}
		return "", fmt.Errorf("runtime_config.fault_tolerance is %s: not a fault-tolerance setting pgfeldera knows (none, at_least_once, exactly_once)", raw)
	case '{':
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return "", fmt.Errorf("runtime_config.fault_tolerance %s: %w", raw, err)
		}
		m, ok := obj["model"]
		if !ok {
			return FTExactlyOnce, nil
		}
		var s string
		if err := json.Unmarshal(m, &s); err != nil {
			return "", fmt.Errorf("runtime_config.fault_tolerance.model is %s: not a fault-tolerance model pgfeldera knows (none, at_least_once, exactly_once)", m)
		}
		switch {
		case strings.EqualFold(s, "none"):
			return FTNone, nil
		case s == string(FTAtLeastOnce):
			return FTAtLeastOnce, nil
		case s == string(FTExactlyOnce):
			return FTExactlyOnce, nil
		}
		return "", fmt.Errorf("runtime_config.fault_tolerance.model is %q: not a fault-tolerance model pgfeldera knows (none, at_least_once, exactly_once)", s)
	}
	return "", fmt.Errorf("runtime_config.fault_tolerance is %s: not a fault-tolerance setting pgfeldera knows", raw)
}

// CheckpointInterval is fault_tolerance.checkpoint_interval_secs as Feldera
// applies it: 60 s by default, clamped to 1..3600, 0 (disabled) when the
// value is null or the pipeline has no fault tolerance.
func (f *FaultTolerance) CheckpointInterval() int {
	m, err := f.Model()
	if err != nil || !m.FaultTolerant() {
		return 0
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(bytes.TrimSpace(f.raw), &obj) != nil {
		return 60 // a legacy string
	}
	v, ok := obj["checkpoint_interval_secs"]
	if !ok {
		return 60
	}
	var n *int64
	if json.Unmarshal(v, &n) != nil {
		return 60
	}
	if n == nil {
		return 0
	}
	return int(min(max(*n, 1), 3600))
}

// FaultToleranceModel is the pipeline's fault-tolerance model (none when
// it reports no runtime configuration).
func (p *Pipeline) FaultToleranceModel() (FTModel, error) {
	if p.RuntimeConfig == nil {
		return FTNone, nil
	}
	return p.RuntimeConfig.FaultTolerance.Model()
}

package feldera_test

import (
	"encoding/json"
	"testing"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// Every form of runtime_config.fault_tolerance, read as Feldera reads it
// (feldera-types config.rs: deserialize_fault_tolerance, FtConfig and its
// ft_config test).
func TestFaultTolerance_Model(t *testing.T) {
	cases := []struct {
		doc      string
		want     feldera.FTModel
		interval int
		bad      bool
	}{
		{doc: `{}`, want: feldera.FTNone},
		{doc: `{"runtime_config": {}}`, want: feldera.FTNone},
		{doc: `{"runtime_config": {"fault_tolerance": null}}`, want: feldera.FTNone},
		{doc: `{"runtime_config": {"fault_tolerance": {"model": "none"}}}`, want: feldera.FTNone},
		{doc: `{"runtime_config": {"fault_tolerance": {"model": "NONE", "checkpoint_interval_secs": 60}}}`, want: feldera.FTNone},
		{doc: `{"runtime_config": {"fault_tolerance": {}}}`, want: feldera.FTExactlyOnce, interval: 60},
		{doc: `{"runtime_config": {"fault_tolerance": {"checkpoint_interval_secs": 5}}}`, want: feldera.FTExactlyOnce, interval: 5},
		{doc: `{"runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": null}}}`, want: feldera.FTExactlyOnce, interval: 0},
		{doc: `{"runtime_config": {"fault_tolerance": {"model": "at_least_once", "checkpoint_interval_secs": 0}}}`, want: feldera.FTAtLeastOnce, interval: 1},
		{doc: `{"runtime_config": {"fault_tolerance": {"model": "at_least_once", "checkpoint_interval_secs": 99999}}}`, want: feldera.FTAtLeastOnce, interval: 3600},
		{doc: `{"runtime_config": {"fault_tolerance": "initial_state"}}`, want: feldera.FTExactlyOnce, interval: 60},
		{doc: `{"runtime_config": {"fault_tolerance": "latest_checkpoint"}}`, want: feldera.FTExactlyOnce, interval: 60},
		{doc: `{"runtime_config": {"fault_tolerance": "sometimes"}}`, bad: true},
		{doc: `{"runtime_config": {"fault_tolerance": {"model": "at_most_once"}}}`, bad: true},
		{doc: `{"runtime_config": {"fault_tolerance": {"model": 3}}}`, bad: true},
		{doc: `{"runtime_config": {"fault_tolerance": true}}`, bad: true},
	}
	for _, c := range cases {
		var p feldera.Pipeline
		if err := json.Unmarshal([]byte(c.doc), &p); err != nil {
			t.Fatalf("%s: %v", c.doc, err)
		}
		got, err := p.FaultToleranceModel()
		if c.bad {
			if err == nil {
				t.Errorf("%s: got model %q, want an error", c.doc, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: got %q, %v; want %q", c.doc, got, err, c.want)
		}
		if got.FaultTolerant() != (c.want != feldera.FTNone) {
			t.Errorf("%s: FaultTolerant() = %v", c.doc, got.FaultTolerant())
		}
		var ival int
		if p.RuntimeConfig != nil {
			ival = p.RuntimeConfig.FaultTolerance.CheckpointInterval()
		}
		if ival != c.interval {
			t.Errorf("%s: checkpoint interval %d, want %d", c.doc, ival, c.interval)
		}
	}
}

package feldera_test

import (
	"encoding/json"
	"errors"
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

// Which failed ingress answers may still be applied later (and so need a
// fence): a refusal before reading proves nothing was queued.
func TestIsOutcomeUnknown(t *testing.T) {
	cases := []struct {
		err     error
		unknown bool
	}{
		{&feldera.APIError{Op: "POST ingress/t", Err: errors.New("connection reset")}, true},
		{&feldera.APIError{StatusCode: 503, Code: "PipelineInteractionUnreachable"}, true},
		{&feldera.APIError{StatusCode: 503, Code: "PipelineUnavailable"}, true},
		{&feldera.APIError{StatusCode: 504}, true},
		{&feldera.APIError{StatusCode: 502, Code: ""}, true},
		{&feldera.APIError{StatusCode: 503, Code: "RestoreInProgress"}, false},
		{&feldera.APIError{StatusCode: 503, Code: "BootstrapInProgress"}, false},
		{&feldera.APIError{StatusCode: 503, Code: "Initializing"}, false},
		{&feldera.APIError{StatusCode: 503, Code: "PipelineInteractionNotDeployed"}, false},
		{&feldera.APIError{StatusCode: 429, Code: "ApiConnectionLimit"}, false},
		{&feldera.APIError{StatusCode: 400, Code: "ParseErrors"}, false},
		{&feldera.APIError{StatusCode: 410, Code: "Terminating"}, false},
		{errors.New("not an API error"), false},
	}
	for _, c := range cases {
		if got := feldera.IsOutcomeUnknown(c.err); got != c.unknown {
			t.Errorf("IsOutcomeUnknown(%v) = %v, want %v", c.err, got, c.unknown)
		}
	}
}

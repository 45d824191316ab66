package felderatest

import (
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// Config describes the pipeline a Server serves.
type Config struct {
	Pipeline string             // default "pipeline"
	Tables   []feldera.Relation // the program's tables
	APIKey   string             // when set, requests need "Authorization: Bearer <APIKey>"

	// PaddedTokens issues tokens in standard base64 with padding (which
	// holds '+', '/' and '='), like the docs' example, to prove clients
	// percent-encode them. Both encodings are accepted.
	PaddedTokens bool
	// IngressTimeout is how long ingress blocks on a paused pipeline before
	// the manager answers 503 (Feldera: 30 s).
	IngressTimeout time.Duration
	// CountOnly makes ingress only count lines: no parsing, no state, tokens
	// complete at once (or after SetCompletionDelay), and COUNT(*) answers
	// the lines counted. For
	// throughput benchmarks of the sender, which insert distinct keys.
	CountOnly bool
	// OnIngress, in CountOnly mode, sees each request body as it arrives
	// (a benchmark's arrival clock). It must not keep body.
	OnIngress func(table string, body []byte, arrived time.Time)
	// FaultTolerant keeps completed state across Restart, like a pipeline
	// with Enterprise fault tolerance, and reports
	// {"model": "at_least_once"}.
	FaultTolerant bool
	// StepsOnPoll runs steps only when a client asks for a token's
	// completion: pushed data stays queued, invisible and uncompleted,
	// until someone waits for it, and a Restart drops it (Feldera loses
	// input that was accepted but not yet fed to a step). A connector that
	// dies right after a POST thus leaves nothing behind in the tables, so
	// a restart that skipped unacknowledged WAL loses rows a test can see.
	StepsOnPoll bool
	// FaultTolerance, when set, is reported verbatim as
	// runtime_config.fault_tolerance (any form Feldera accepts: `{}`,
	// `{"model": "none"}`, `"latest_checkpoint"`, `null`, …), and Restart
	// keeps completed state exactly when Feldera would read it as fault
	// tolerant. It overrides FaultTolerant.
	FaultTolerance string
	// CheckpointEvery takes a checkpoint this often when the model is not
	// none; 0 reads checkpoint_interval_secs from FaultTolerance, as
	// Feldera does (default 60 s, null: only on request).
	CheckpointEvery time.Duration
	// NoCheckpoints answers POST /checkpoint with 501 EnterpriseFeature
	// even under fault tolerance, like Feldera's OSS edition.
	NoCheckpoints bool
	// OrderColumn names a column (in any table that has it and a primary
	// key) whose value only grows per key in the source's commit order,
	// such as a version counter. A step that applies an insert of a key
	// with a smaller value than one applied before for that key counts an
	// order violation (OrderViolations): rows that reached Feldera out of
	// commit order.
	OrderColumn string
	// OnState, when set, sees every state the pipeline exposes: after each
	// step that applied input outside a transaction, and after each
	// commit. It runs with the double locked: it may read the View, and
	// must not call the Server.
	OnState func(View)
	// OutputEndpoints are the output connectors /stats lists; none by
	// default (then completion can run ahead of the steps: feldera#7169).
	OutputEndpoints []string

	// How the pipeline steps (internal/circuit). Zero values take the
	// defaults, which follow Feldera's own where it has one.
	//
	// A step takes StepTime (DefaultStepTime), plus a random part of
	// StepJitter (DefaultStepJitter), plus StepPerRecord for each record
	// it feeds; set StepTime negative for steps that take no time.
	StepTime, StepJitter, StepPerRecord time.Duration
	// CommitPerRecord is how long an API or connector transaction's
	// commit takes per record it holds, on top of SetCommitDelay: a long
	// commit runs over many steps and feeds no input meanwhile.
	CommitPerRecord time.Duration
	// StepRecords is the per-endpoint soft cap of records one step
	// feeds (DefaultStepRecords: 8 workers × 10,000).
	StepRecords int
	// ReadBytes is how much of a request body one read takes: each read
	// is split at record boundaries and queued at once, so a step can
	// take a prefix of a request (DefaultReadBytes).
	ReadBytes int
	// MaxQueuedRecords is how many records an ingress endpoint queues
	// before it stops reading a body until a step takes some
	// (DefaultMaxQueuedRecords); a body held past IngressTimeout is
	// answered 503, as the manager does, with what was read queued.
	MaxQueuedRecords int
	// NoAutoTransactions turns off automatic per-step transactions, as
	// Feldera's dev_tweaks.disable_auto_transaction does.
	NoAutoTransactions bool
	// Seed seeds the step jitter (0: the clock).
	Seed uint64
}

// withDefaults fills the stepping defaults.
func (cfg Config) withDefaults() Config {
	switch {
	case cfg.StepTime == 0:
		cfg.StepTime = DefaultStepTime
		if cfg.StepJitter == 0 {
			cfg.StepJitter = DefaultStepJitter
		}
	case cfg.StepTime < 0:
		cfg.StepTime = 0
	}
	if cfg.StepRecords <= 0 {
		cfg.StepRecords = DefaultStepRecords
	}
	if cfg.ReadBytes <= 0 {
		cfg.ReadBytes = DefaultReadBytes
	}
	if cfg.MaxQueuedRecords <= 0 {
		cfg.MaxQueuedRecords = DefaultMaxQueuedRecords
	}
	return cfg
}

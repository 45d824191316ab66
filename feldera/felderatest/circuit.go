package felderatest

import (
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/circuit"
)

// ---- the circuit: steps, the input they take, and when results show ----
//
// The model is internal/circuit's (circuit.go there, with the Feldera
// functions it follows); here are its defaults, and what a step that
// ends shows.

// Stepping defaults (Config).
const (
	// DefaultStepTime and DefaultStepJitter: a step takes 2 to 5 ms, plus
	// StepPerRecord per record fed.
	DefaultStepTime   = 2 * time.Millisecond
	DefaultStepJitter = 3 * time.Millisecond
	// DefaultStepRecords is Feldera's per-endpoint soft cap per step with
	// the double's 8 workers: workers × DEFAULT_MAX_WORKER_BATCH_SIZE
	// (10,000; ControllerInner::max_connector_batch_size).
	DefaultStepRecords = 8 * 10_000
	// DefaultReadBytes is how much of a request body one read returns:
	// each read is split at record boundaries and queued at once
	// (http/input.rs, complete_request).
	DefaultReadBytes = 32 << 10
	// DefaultMaxQueuedRecords: an HTTP ingress endpoint stops reading a
	// body while this many of its records wait for a step
	// (HttpInputTransport::default_max_buffered_records).
	DefaultMaxQueuedRecords = 100_000
)

// publish makes a step's or a transaction's records part of the tables
// and completes their endpoints up to them, at the current step; api
// counts a committed API or connector transaction.
func (s *Server) publish(fed []*circuit.Buffer, api bool) {
	for _, b := range fed {
		for _, o := range b.Ops {
			if !b.EP.Table.InOrder(o) {
				s.orderViolations++
			}
			if b.EP.Table.Apply(o) {
				s.missedDeletes++
			}
		}
		s.processed += uint64(b.Records)
		if b.UpTo > b.EP.Completed {
			b.EP.Completed = b.UpTo
			b.EP.Step = s.c.Steps
		}
	}
	if api && len(fed) > 0 {
		s.txnCommits++
	}
	s.exposed()
	if s.deferredCheckpoint && !s.c.InTransaction() {
		s.deferredCheckpoint = false
		s.checkpointLocked(s.c.IdleAt()) // checkpoints wait for transactions
	}
}

// Loaded sets cfg's stepping to a pipeline under load, the one the
// connector and crash suites run against: steps of 5 to 20 ms plus 2 µs
// per record, a per-endpoint cap of 2,000 records a step (so a batch of
// pgfeldera's lands over several steps), bodies read 32 KiB at a time,
// and commits that take 5 µs per record. Fields already set are kept.
func Loaded(cfg *Config) {
	if cfg.StepTime == 0 {
		cfg.StepTime, cfg.StepJitter = 5*time.Millisecond, 15*time.Millisecond
	}
	if cfg.StepPerRecord == 0 {
		cfg.StepPerRecord = 2 * time.Microsecond
	}
	if cfg.StepRecords == 0 {
		cfg.StepRecords = 2_000
	}
	if cfg.CommitPerRecord == 0 {
		cfg.CommitPerRecord = 5 * time.Microsecond
	}
}

package felderatest

import (
	"math/rand/v2"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/table"
)

// ---- the circuit: steps, the input they take, and when results show ----
//
// Feldera's circuit thread (crates/adapters/src/controller.rs,
// CircuitThread::run) parks until its StepTrigger says to step: when input
// is buffered (min_batch_size_records is 0 by default, so any record), or
// a transaction's commit is requested or running
// (transaction_commit_requested). A step (CircuitThread::step) then
//
//  1. feeds input (input_step): nothing while a commit runs; otherwise each
//     endpoint's queued buffers, oldest first, until the endpoint reached
//     its soft cap of workers × max_worker_batch_size records
//     (InputQueue::flush_with_aux_until in crates/adapterlib/src/transport.rs:
//     one buffer may overshoot it);
//  2. advances the transaction state (advance_transaction_state): with no
//     API or connector transaction, the step is an automatic transaction
//     that starts and commits at once (StartAndCommit), under the id
//     last_transaction_id + 1;
//  3. evaluates the circuit, which takes time; a commit may take several
//     steps (commit_progress), and feeds no input meanwhile.
//
// Outputs, the ad-hoc snapshot and completion tokens move only when a step
// ends with no transaction in progress (CircuitThread::step,
// update_snapshot and push_output). The double applies a transaction's
// records to its tables at that moment, so every state it exposes is one
// Feldera would show.
//
// The double has no circuit goroutine: advance(now) plays the steps that
// would have run by now, each at the time it would have started, before
// anything reads or changes the state. Every input buffer carries the time
// it became available, so a step takes exactly what was queued when it
// began, however late the double looks.

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
	// commitSlice is the most of a commit's work one step does: a long
	// commit runs over many steps, as Feldera's does, and /stats shows
	// its progress in between.
	commitSlice = 50 * time.Millisecond
)

// buffer is one chunk of an ingress request, queued for a step: a network
// read split at record boundaries.
type buffer struct {
	ep      *endpoint
	req     int // the request it came in (PeakQueued)
	ops     []table.Op
	records int       // records it carries
	bytes   int       // of body text
	readyAt time.Time // when a step may take it: its arrival (+ SetCompletionDelay)
	upTo    uint64    // the endpoint's records queued up to and including it
}

// txnPhase is Feldera's TransactionState.
type txnPhase int

const (
	txnNone       txnPhase = iota // no transaction: steps run outside one (auto transactions off)
	txnStarted                    // Started: input is indexed, nothing shows
	txnCommitting                 // Committing: no input is fed; done at the end of its last step
)

// txnState is the transaction the circuit runs (TransactionState).
type txnState struct {
	phase      txnPhase
	tid        int64
	auto       bool      // an ordinary step's automatic transaction
	since      time.Time // when the current phase began (transaction_msecs)
	records    int       // records fed to it
	fed        []*buffer // applied at its commit
	commitWork time.Duration
	commitLeft time.Duration
	commitFrom time.Time // when the commit was asked (a step may not start earlier)
}

// initiators is Feldera's TransactionInitiators: who wants a transaction.
type initiators struct {
	tid        int64 // 0: none
	api        int   // 0 none, phaseStarted, phaseCommitted
	connectors map[string]int
}

const (
	phaseStarted   = 1
	phaseCommitted = 2
)

// ongoing: a participant may still push data (is_ongoing).
func (in *initiators) ongoing() bool {
	if in.api == phaseStarted {
		return true
	}
	for _, p := range in.connectors {
		if p == phaseStarted {
			return true
		}
	}
	return false
}

// active: someone started a transaction, committed or not (is_active).
func (in *initiators) active() bool { return in.api != 0 || len(in.connectors) > 0 }

func (in *initiators) readyToCommit() bool { return in.active() && !in.ongoing() }

func (in *initiators) clear() { *in = initiators{} }

// stepRun is a step in progress.
type stepRun struct {
	start, end time.Time
	fed        []*buffer
	commit     time.Duration // the part of a commit's work it does
}

func (s *Server) stepTime() time.Duration {
	d := s.cfg.StepTime
	if j := s.cfg.StepJitter; j > 0 {
		d += time.Duration(s.rng.Int64N(int64(j)))
	}
	return d
}

// advance plays every step that would have begun and ended by now.
func (s *Server) advance(now time.Time) { s.run(now, !s.cfg.StepsOnPoll) }

// run is advance; start says whether new steps may begin (Config.StepsOnPoll
// lets only a completion poll begin one).
func (s *Server) run(now time.Time, start bool) {
	for {
		if s.cur != nil {
			if s.cur.end.After(now) {
				return
			}
			s.endStep()
		}
		if !start {
			return
		}
		at, ok := s.nextStep(now)
		if !ok {
			return
		}
		s.beginStep(at)
	}
}

// nextStep is StepTrigger::trigger: when the next step begins, if it
// begins by now.
func (s *Server) nextStep(now time.Time) (time.Time, bool) {
	if s.hold {
		return time.Time{}, false
	}
	free := s.idleAt
	if s.resumedAt.After(free) {
		free = s.resumedAt
	}
	// transaction_commit_requested: a transaction runs and nobody can
	// push more into it.
	if s.state.phase != txnNone && !s.init.ongoing() {
		at := free
		if s.state.commitFrom.After(at) {
			at = s.state.commitFrom
		}
		if !at.After(now) {
			return at, true
		}
	}
	var first time.Time
	for _, b := range s.queue {
		if first.IsZero() || b.readyAt.Before(first) {
			first = b.readyAt
		}
	}
	if first.IsZero() {
		return time.Time{}, false
	}
	if first.Before(free) {
		first = free
	}
	return first, !first.After(now)
}

// beginStep starts a step at time at: input first, then the transaction
// state, as CircuitThread::step does.
func (s *Server) beginStep(at time.Time) {
	run := &stepRun{start: at}
	if s.state.phase != txnCommitting {
		run.fed = s.takeInput(at)
	}
	s.steps++
	s.advanceTxn(at)
	records := 0
	for _, b := range run.fed {
		records += b.records
	}
	d := s.stepTime() + time.Duration(records)*s.cfg.StepPerRecord
	switch s.state.phase {
	case txnStarted:
		s.state.records += records
		s.state.fed = append(s.state.fed, run.fed...)
	case txnCommitting:
		s.state.records += records
		s.state.fed = append(s.state.fed, run.fed...)
		if s.state.commitLeft > 0 {
			run.commit = min(s.state.commitLeft, commitSlice)
			d = max(d, run.commit)
		}
	}
	run.end = at.Add(d)
	s.cur = run
}

// takeInput feeds a step: per endpoint, its ready buffers in arrival
// order until the endpoint reached StepRecords.
func (s *Server) takeInput(at time.Time) []*buffer {
	var fed []*buffer
	taken := map[*endpoint]int{}
	n := 0
	for _, b := range s.queue {
		if b.readyAt.After(at) || taken[b.ep] >= s.cfg.StepRecords {
			s.queue[n] = b
			n++
			continue
		}
		taken[b.ep] += b.records
		fed = append(fed, b)
	}
	clear(s.queue[n:])
	s.queue = s.queue[:n]
	return fed
}

// advanceTxn is advance_transaction_state (controller.rs): start a
// transaction the API or a connector wants, commit one nobody can push to
// any more, or run the step as an automatic transaction.
func (s *Server) advanceTxn(at time.Time) {
	st := &s.state
	if s.init.ongoing() {
		if st.phase == txnNone {
			*st = txnState{phase: txnStarted, tid: s.init.tid, since: at}
		}
		return
	}
	switch st.phase {
	case txnStarted:
		st.phase, st.since = txnCommitting, at
		st.commitWork = s.commitDelay + time.Duration(st.records)*s.cfg.CommitPerRecord
		st.commitLeft = st.commitWork
		s.init.clear()
	case txnNone:
		if s.cfg.NoAutoTransactions {
			return
		}
		s.lastTID++
		*st = txnState{phase: txnCommitting, tid: s.lastTID, auto: true, since: at}
	}
}

// endStep finishes the step in progress: a commit whose work is done makes
// its transaction visible, at this step.
func (s *Server) endStep() {
	run := s.cur
	s.cur = nil
	s.idleAt = run.end
	st := &s.state
	switch st.phase {
	case txnNone:
		s.publish(run.fed, false)
	case txnCommitting:
		st.commitLeft -= run.commit
		if st.commitLeft > 0 {
			return
		}
		fed, auto := st.fed, st.auto
		*st = txnState{}
		s.publish(fed, !auto)
	}
}

// publish makes a step's or a transaction's records part of the tables
// and completes their endpoints up to them, at the current step; api
// counts a committed API or connector transaction.
func (s *Server) publish(fed []*buffer, api bool) {
	for _, b := range fed {
		for _, o := range b.ops {
			if !b.ep.table.InOrder(o) {
				s.orderViolations++
			}
			if b.ep.table.Apply(o) {
				s.missedDeletes++
			}
		}
		s.processed += uint64(b.records)
		if b.upTo > b.ep.completed {
			b.ep.completed = b.upTo
			b.ep.step = s.steps
		}
	}
	if api && len(fed) > 0 {
		s.txnCommits++
	}
	s.exposed()
	if s.deferredCheckpoint && s.state.phase == txnNone {
		s.deferredCheckpoint = false
		s.checkpointLocked(s.idleAt) // checkpoints wait for transactions
	}
}

// buffered is how many records of ep wait for a step.
func (s *Server) buffered(ep *endpoint) (records, bytes int) {
	for _, b := range s.queue {
		if b.ep == ep {
			records += b.records
			bytes += b.bytes
		}
	}
	return records, bytes
}

// queueBuffer adds a chunk of a request to its endpoint's queue.
func (s *Server) queueBuffer(b *buffer, now time.Time) {
	s.advance(now)
	b.ep.queued += uint64(b.records)
	b.upTo = b.ep.queued
	b.readyAt = now.Add(s.delay)
	s.queue = append(s.queue, b)
	s.notePeak()
	s.advance(now)
}

func newRNG(seed uint64) *rand.Rand {
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
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

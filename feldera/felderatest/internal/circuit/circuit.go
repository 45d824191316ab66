package circuit

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
// The double has no circuit goroutine: Advance(now) plays the steps that
// would have run by now, each at the time it would have started, before
// anything reads or changes the state. Every input buffer carries the time
// it became available, so a step takes exactly what was queued when it
// began, however late the double looks.

const (
	// commitSlice is the most of a commit's work one step does: a long
	// commit runs over many steps, as Feldera's does, and /stats shows
	// its progress in between.
	commitSlice = 50 * time.Millisecond
)

// Config is how the circuit steps: felderatest.Config's stepping
// fields, with the defaults filled in.
type Config struct {
	StepTime, StepJitter, StepPerRecord time.Duration
	CommitPerRecord                     time.Duration
	StepRecords                         int
	NoAutoTransactions                  bool
	StepsOnPoll                         bool
	Seed                                uint64
}

// Endpoint is an HTTP ingress endpoint: its queue's place in the records
// it was sent, and how far steps completed them.
type Endpoint struct {
	ID        uint64
	Name      string // <path segment as sent>.api-ingress-<16 hex>, as /stats lists it
	Table     *table.Table
	Queued    uint64 // records queued so far
	Completed uint64 // records processed and visible so far
	Step      uint64 // the step that completed the endpoint's last records
}

// Circuit is the pipeline's circuit: the input queued for steps, the step
// in progress, and the transactions.
type Circuit struct {
	cfg Config
	// publish makes a step's or a transaction's records visible (api: a
	// committed API or connector transaction's); it runs at the end of
	// the step.
	publish func(fed []*Buffer, api bool)

	queue       []*Buffer // input no step took yet, in arrival order
	cur         *stepRun  // the step in progress
	idleAt      time.Time // when the last step ended
	resumedAt   time.Time // when HoldCompletion(false) let steps run again
	rng         *rand.Rand
	hold        bool
	Delay       time.Duration // SetCompletionDelay
	lastTID     int64         // per process: last_transaction_id
	init        initiators    // who wants a transaction
	state       txnState      // the transaction the circuit runs
	CommitDelay time.Duration // SetCommitDelay
	TxnDropped  int           // API transactions committed before their first step
	Steps       uint64        // the circuit's step count; carries across restarts
	PeakQueued  int           // the most ingress requests queued and not yet completed at once
	PeakRows    int           // the most records queued and not yet completed at once
}

// New makes a circuit that steps as cfg says and calls publish when a
// step or a transaction makes records visible.
func New(cfg Config, publish func(fed []*Buffer, api bool)) *Circuit {
	return &Circuit{cfg: cfg, publish: publish, rng: newRNG(cfg.Seed)}
}

// Reset is a new process. Input not yet processed, the step in progress
// and transactions live in the process's memory only: a restart drops
// them, their data, and the transaction id counter.
func (c *Circuit) Reset(now time.Time) {
	c.queue, c.cur = nil, nil
	c.idleAt = now
	c.lastTID, c.init, c.state = 0, initiators{}, txnState{}
}

// SetHold stops (true) or restarts (false) steps (HoldCompletion).
func (c *Circuit) SetHold(hold bool, now time.Time) {
	c.Advance(now)
	if c.hold && !hold {
		c.resumedAt = now
	}
	c.hold = hold
	c.Advance(now)
}

// Busy reports whether a step is in progress.
func (c *Circuit) Busy() bool { return c.cur != nil }

// StepEnd is when the step in progress ends, if one is.
func (c *Circuit) StepEnd() (time.Time, bool) {
	if c.cur == nil {
		return time.Time{}, false
	}
	return c.cur.end, true
}

// IdleAt is when the last step ended.
func (c *Circuit) IdleAt() time.Time { return c.idleAt }

// Buffer is one chunk of an ingress request, queued for a step: a network
// read split at record boundaries.
type Buffer struct {
	EP      *Endpoint
	Req     int // the request it came in (PeakQueued)
	Ops     []table.Op
	Records int       // records it carries
	Bytes   int       // of body text
	readyAt time.Time // when a step may take it: its arrival (+ SetCompletionDelay)
	UpTo    uint64    // the endpoint's records queued up to and including it
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
	fed        []*Buffer // applied at its commit
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
	fed        []*Buffer
	commit     time.Duration // the part of a commit's work it does
}

func (c *Circuit) stepTime() time.Duration {
	d := c.cfg.StepTime
	if j := c.cfg.StepJitter; j > 0 {
		d += time.Duration(c.rng.Int64N(int64(j)))
	}
	return d
}

// Advance plays every step that would have begun and ended by now.
func (c *Circuit) Advance(now time.Time) { c.Run(now, !c.cfg.StepsOnPoll) }

// Run is Advance; start says whether new steps may begin (Config.StepsOnPoll
// lets only a completion poll begin one).
func (c *Circuit) Run(now time.Time, start bool) {
	for {
		if c.cur != nil {
			if c.cur.end.After(now) {
				return
			}
			c.endStep()
		}
		if !start {
			return
		}
		at, ok := c.nextStep(now)
		if !ok {
			return
		}
		c.beginStep(at)
	}
}

// nextStep is StepTrigger::trigger: when the next step begins, if it
// begins by now.
func (c *Circuit) nextStep(now time.Time) (time.Time, bool) {
	if c.hold {
		return time.Time{}, false
	}
	free := c.idleAt
	if c.resumedAt.After(free) {
		free = c.resumedAt
	}
	// transaction_commit_requested: a transaction runs and nobody can
	// push more into it.
	if c.state.phase != txnNone && !c.init.ongoing() {
		at := free
		if c.state.commitFrom.After(at) {
			at = c.state.commitFrom
		}
		if !at.After(now) {
			return at, true
		}
	}
	var first time.Time
	for _, b := range c.queue {
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
func (c *Circuit) beginStep(at time.Time) {
	run := &stepRun{start: at}
	if c.state.phase != txnCommitting {
		run.fed = c.takeInput(at)
	}
	c.Steps++
	c.advanceTxn(at)
	records := 0
	for _, b := range run.fed {
		records += b.Records
	}
	d := c.stepTime() + time.Duration(records)*c.cfg.StepPerRecord
	switch c.state.phase {
	case txnStarted:
		c.state.records += records
		c.state.fed = append(c.state.fed, run.fed...)
	case txnCommitting:
		c.state.records += records
		c.state.fed = append(c.state.fed, run.fed...)
		if c.state.commitLeft > 0 {
			run.commit = min(c.state.commitLeft, commitSlice)
			d = max(d, run.commit)
		}
	}
	run.end = at.Add(d)
	c.cur = run
}

// takeInput feeds a step: per endpoint, its ready buffers in arrival
// order until the endpoint reached StepRecords.
func (c *Circuit) takeInput(at time.Time) []*Buffer {
	var fed []*Buffer
	taken := map[*Endpoint]int{}
	n := 0
	for _, b := range c.queue {
		if b.readyAt.After(at) || taken[b.EP] >= c.cfg.StepRecords {
			c.queue[n] = b
			n++
			continue
		}
		taken[b.EP] += b.Records
		fed = append(fed, b)
	}
	clear(c.queue[n:])
	c.queue = c.queue[:n]
	return fed
}

// advanceTxn is advance_transaction_state (controller.rs): start a
// transaction the API or a connector wants, commit one nobody can push to
// any more, or run the step as an automatic transaction.
func (c *Circuit) advanceTxn(at time.Time) {
	st := &c.state
	if c.init.ongoing() {
		if st.phase == txnNone {
			*st = txnState{phase: txnStarted, tid: c.init.tid, since: at}
		}
		return
	}
	switch st.phase {
	case txnStarted:
		st.phase, st.since = txnCommitting, at
		st.commitWork = c.CommitDelay + time.Duration(st.records)*c.cfg.CommitPerRecord
		st.commitLeft = st.commitWork
		c.init.clear()
	case txnNone:
		if c.cfg.NoAutoTransactions {
			return
		}
		c.lastTID++
		*st = txnState{phase: txnCommitting, tid: c.lastTID, auto: true, since: at}
	}
}

// endStep finishes the step in progress: a commit whose work is done makes
// its transaction visible, at this step.
func (c *Circuit) endStep() {
	run := c.cur
	c.cur = nil
	c.idleAt = run.end
	st := &c.state
	switch st.phase {
	case txnNone:
		c.publish(run.fed, false)
	case txnCommitting:
		st.commitLeft -= run.commit
		if st.commitLeft > 0 {
			return
		}
		fed, auto := st.fed, st.auto
		*st = txnState{}
		c.publish(fed, !auto)
	}
}

// Buffered is how many records of ep wait for a step.
func (c *Circuit) Buffered(ep *Endpoint) (records, bytes int) {
	for _, b := range c.queue {
		if b.EP == ep {
			records += b.Records
			bytes += b.Bytes
		}
	}
	return records, bytes
}

// QueueBuffer adds a chunk of a request to its endpoint's queue.
func (c *Circuit) QueueBuffer(b *Buffer, now time.Time) {
	c.Advance(now)
	b.EP.Queued += uint64(b.Records)
	b.UpTo = b.EP.Queued
	b.readyAt = now.Add(c.Delay)
	c.queue = append(c.queue, b)
	c.notePeak()
	c.Advance(now)
}

// notePeak records how many requests and records Feldera buffers: queued,
// not yet fed to a step (the 100,000 records of its ingress bound).
func (c *Circuit) notePeak() {
	reqs := map[int]bool{}
	n := 0
	for _, b := range c.queue {
		reqs[b.Req] = true
		n += b.Records
	}
	c.PeakQueued = max(c.PeakQueued, len(reqs))
	c.PeakRows = max(c.PeakRows, n)
}

func newRNG(seed uint64) *rand.Rand {
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

package connector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/failover"
	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/internal/testhook"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/snapshot"
	"github.com/pgfeldera/pgfeldera/state"
)

// Sink is what the connector needs from Feldera: the union of what its
// parts declare (each documents its methods). *feldera.Client satisfies
// it.
type Sink interface {
	delivery.Sink     // ingress, completion waits, ad-hoc queries
	delivery.Poller   // a completion's step, polled
	delivery.TxnAPI   // Feldera transactions
	delivery.WatchAPI // the pipeline, /stats, checkpoints
}

// Connector streams one publication through one slot into a Sink.
type Connector struct {
	cfg    Config
	sink   Sink
	logger *slog.Logger

	// srv is the server the current session reached (Started).
	srv failover.Server
	// spare: a connection for chunks startup opened, which the
	// session's incremental snapshot takes (incremental.Spare).
	spare incremental.Spare
	// sentHigh is the highest WAL position of a change this process sent
	// Feldera: after a failover, a fork before it means phantom rows.
	sentHigh pglogrepl.LSN
	// acked is the acknowledged position: the slot's confirmed position
	// when a session begins, then the session ledger's, copied by
	// stream.advance. The ledger alone moves it; the supervisor reads it
	// between sessions.
	acked pglogrepl.LSN
	// ackMoves counts acknowledgements that moved the position forward:
	// progress, which resets the reconnect backoff (a session that starts
	// from the slot's position is not progress).
	ackMoves int
	// healthy is the last time the ack moved or a session had nothing
	// pending: the no-progress deadline counts from it.
	healthy time.Time

	fence        *delivery.Fence        // the ingress fence (see Config.IngressFence)
	txns         *delivery.Transactions // the Feldera transaction held open, if any
	out          *delivery.Sender       // sends batches through the fence and txns
	loader       *snapshot.Loader       // copies tables into Feldera, retracts from it
	silentEnd    bool                   // the last session ended silent: end the walsender that may still hold the slot
	hardStop     context.Context        // canceled StopTimeout after a graceful stop began: every wait ends
	tableStats   []*TableStats
	nulledLogged sync.Map // table\x00column: a value was delivered as NULL (logged once)
	health       health
	observer     Observer
	stats        Stats

	gate atomic.Int32         // the Gate of the current session (status, metrics)
	cp   delivery.Checkpoints // what the session, the watcher and the metrics share of checkpoints
	// step is the session ledger's step watermark, published by
	// stream.advance for other goroutines to read.
	step          atomic.Uint64
	probed        bool // POST /checkpoint was tried once under fault tolerance
	warnedOutputs bool
	saidProgress  bool           // whether the progress table is used was logged (once a process)
	test          testhook.Hooks // the tests' seams: zero in production; set only by export_test.go
}

// New returns a connector. It does not connect.
func New(cfg Config, sink Sink) (*Connector, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	c := &Connector{cfg: cfg, sink: sink, logger: cfg.Logger.With("component", "connector", "slot", cfg.Slot), observer: cfg.Observer}
	if c.observer == nil {
		c.observer = nopObserver{}
	}
	c.cp.Failures = &c.stats.CheckpointFailures
	c.fence = delivery.NewFence(cfg.IngressFence, c.logger)
	c.txns = &delivery.Transactions{API: sink, Fence: c.fence, Observer: c.observer, Logger: c.logger,
		CompletionTimeout: cfg.CompletionTimeout, CommitStallTimeout: cfg.CommitStallTimeout, Accepted: cfg.AckMode == AckAccepted,
		Started: &c.stats.Transactions, Conflicts: &c.stats.TransactionConflicts, Partial: &c.stats.PartialCommits}
	c.out = &delivery.Sender{Sink: sink, Fence: c.fence, Txns: c.txns, Observer: c.observer, Logger: c.logger, Hooks: &c.test,
		HardStop: c.stopContext, CompletionTimeout: cfg.CompletionTimeout,
		NeedStep:   func() bool { return c.Gate() == delivery.GateCheckpoint },
		Batches:    &c.stats.Batches,
		FlushSince: &c.health.flushSince, FlushFailed: &c.health.flushFailed}
	routes, n := catalog.Routes(cfg.Tables)
	c.tableStats = make([]*TableStats, n)
	for i, t := range cfg.Tables {
		if ts := c.tableStats[routes[i]]; ts != nil {
			ts.Source += "," + t.Schema + "." + t.Name
			continue
		}
		c.tableStats[routes[i]] = &TableStats{Source: t.Schema + "." + t.Name, Dest: t.Dest}
	}
	c.loader = &snapshot.Loader{Sender: c.out, Bounds: c.bounds(), DSN: cfg.DSN, GUCs: replconn.PinnedGUCs,
		SnapshotTransaction: cfg.SnapshotTransaction, StateFile: cfg.StateFile, Slot: cfg.Slot,
		Table: func(route int) (*atomic.Int64, *atomic.Int64) {
			return &c.tableStats[route].Estimate, &c.tableStats[route].Copied
		},
		SnapshotRows: &c.stats.SnapshotRows, Retracted: &c.stats.Retracted, Progress: &c.health.progress, Logger: c.logger}
	return c, nil
}

// FatalError is an error retrying cannot fix: the process should exit
// (fatal.Error).
type FatalError = fatal.Error

// isFatal reports whether a session error must end the process.
func isFatal(err error) bool { return fatal.Is(err) }

// ErrNoProgress is returned when nothing was acknowledged for
// NO_PROGRESS_TIMEOUT while work was pending.
var ErrNoProgress = errors.New("no progress")

// Run streams until ctx is canceled (a graceful stop: returns nil after the
// final acknowledgement) or a fatal error. Every other error ends the
// session and a new one starts after a backoff; only an acknowledgement
// that moved resets the backoff.
func (c *Connector) Run(ctx context.Context) error {
	if c.cfg.AckMode == AckAccepted {
		c.logger.Warn("FELDERA_ACK_MODE=accepted: acknowledging WAL on HTTP 200, before Feldera completes it; a Feldera failure LOSES DATA. Use only to demonstrate that loss.")
	}
	defer c.armStop(ctx)()
	if c.cfg.StateFile != "" {
		// Taken before anything reads or tidies the state file.
		lock, err := state.Lock(c.cfg.StateFile)
		if err != nil {
			return &FatalError{Err: err}
		}
		defer lock.Unlock()
	}
	if err := c.openFence(); err != nil {
		return &FatalError{Err: err}
	}
	defer c.fence.Close()
	session := c.session
	if c.test.Session != nil {
		session = c.test.Session
	}
	err := c.supervise(ctx, session)
	c.exitTxn(err)
	return err
}

// exitTxn commits, as the process exits, a Feldera transaction a session
// left open: one whose send failed (with the progress table the next
// session would have joined it), or the part of a source transaction a
// fatal error came in the middle of. Left open, it would hold every
// other writer's input and every checkpoint until a start joined it.
// It holds part of a source transaction, so the commit is said loudly
// (Transactions.NotePart).
func (c *Connector) exitTxn(err error) {
	if !c.txns.Held() || c.txns.ID() == 0 {
		return
	}
	why := "the process exits inside a source transaction"
	if err != nil {
		why += ": " + err.Error()
	}
	c.txns.Abandon(context.Background(), why)
}

// armStop makes a graceful stop (ctx canceled) hard after STOP_TIMEOUT:
// unfinished work is abandoned, and the slot replays it. It returns what
// disarms it.
func (c *Connector) armStop(ctx context.Context) func() {
	c.out.Stopping = ctx.Done()
	hardStop, abandon := context.WithCancel(context.Background())
	c.hardStop = hardStop
	stopAfter := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(c.cfg.StopTimeout, func() {
			c.logger.Warn("session: STOP_TIMEOUT reached: abandoning unfinished work; the slot replays it", "stop_timeout", c.cfg.StopTimeout)
			abandon()
		})
		context.AfterFunc(hardStop, func() { t.Stop() })
	})
	return func() {
		stopAfter()
		abandon()
	}
}

// supervise runs sessions until ctx is canceled or one ends fatally,
// reconnecting with backoff: exponential intervals (1 s → 30 s by
// default) with full jitter, the wait uniform in [0, interval), because
// every connector attached to a primary may lose it at the same instant.
// Only progress resets the backoff, and NO_PROGRESS_TIMEOUT without
// progress ends the process.
func (c *Connector) supervise(ctx context.Context, session func(context.Context) error) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = c.cfg.BackoffInitial
	bo.MaxInterval = c.cfg.BackoffMax
	bo.RandomizationFactor = 0
	bo.Multiplier = 2
	bo.MaxElapsedTime = 0
	bo.Reset()
	c.healthy = time.Now()
	for {
		before := c.ackMoves
		err := session(ctx)
		if ctx.Err() != nil {
			// A graceful stop: what was not acknowledged replays from the slot.
			if err != nil && !isFatal(err) {
				c.logger.Warn("session: stopped before finishing", "err", err)
				return nil
			}
			return err
		}
		if c.ackMoves != before {
			bo.Reset() // only progress resets the backoff, not a reconnect
		}
		wait, err := c.sessionEnded(err, bo.NextBackOff())
		if err != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// sessionEnded counts a session that ended with err and says how long to
// wait before the next (drawn below interval), or returns the error that
// ends the process: a fatal one, or NO_PROGRESS_TIMEOUT.
func (c *Connector) sessionEnded(err error, interval time.Duration) (time.Duration, error) {
	var silent *replconn.SilentError
	c.silentEnd = errors.As(err, &silent)
	lastProgress := c.healthy
	if err == nil {
		err = ErrStreamEnded
	}
	c.observer.SessionEnded(string(CauseOf(err)))
	if isFatal(err) {
		return 0, err
	}
	if since := time.Since(lastProgress); since > c.cfg.NoProgressTimeout {
		return 0, &FatalError{Err: fmt.Errorf("%w for %s (NO_PROGRESS_TIMEOUT) while work was pending: last error: %v", ErrNoProgress, since.Round(time.Second), err)}
	}
	if c.test.OnBackoff != nil {
		c.test.OnBackoff(interval)
	}
	wait := time.Duration(rand.Int64N(int64(interval) + 1))
	if left := c.cfg.NoProgressTimeout - time.Since(lastProgress); wait > left {
		wait = left + time.Millisecond
	}
	c.logger.Warn("session: ended, reconnecting", "err", err, "backoff", wait.Round(time.Millisecond), "acked", c.acked)
	return wait, nil
}

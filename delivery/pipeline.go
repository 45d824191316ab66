package delivery

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/decode"
)

// Pipeline is a session's sending side, from a decoded change to "durable
// in Feldera": the filling batch and its spare; when a batch is sealed and
// under which Feldera transaction plan (seal.go); the one POST at a time,
// the batches in flight with their sizes and the completer that polls
// their tokens (post.go); the Feldera transaction held open across
// batches and the one joined after a crash; the progress row's skip and
// the batches that carry the row alone; and the Ledger, which it alone
// feeds (ack.go).
//
// The session loop tells it what the stream says (Begin, Rows, Commit,
// Keepalive) and hands it the events its goroutines send (Apply); each
// input reports whether the acknowledged position moved, which the loop
// then publishes and sends to Postgres.
//
// Goroutines: Start starts the completer; Seal starts one poster at a
// time; Retract runs one retraction at a time. Each reports through Emit,
// and Wait joins them all. Everything else runs on the session loop's
// goroutine: a Pipeline is not safe for concurrent use.
type Pipeline struct {
	Sender    *Sender
	Poll      Poller
	Targets   []*decode.Target // per route: its Feldera table
	Bounds    Bounds           // BATCH_MAX_ROWS, BATCH_MAX_BYTES
	Linger    time.Duration    // BATCH_LINGER_MS; 0: a batch per source transaction
	MaxFlight int              // BATCH_MAX_IN_FLIGHT
	Interval  time.Duration    // at most one batch of the progress row alone per interval
	Mode      string           // FELDERA_TRANSACTIONS (the progress row makes it always)
	Accepted  bool             // FELDERA_ACK_MODE=accepted: complete at the POST's answer (unsafe)
	// Emit hands an event to the session loop and wakes it; it never
	// blocks (see EventBuffer).
	Emit func(Event)
	// Sealed sees each batch sealed, with whether it holds rows of the
	// open source transaction, and returns the bound of the WAL
	// positions of its changes (the failover check's bound on what
	// Feldera may hold: failover.SentBound).
	Sealed func(openRows bool) pglogrepl.LSN
	Logger *slog.Logger

	led     *Ledger
	ctx     context.Context // the posters': outlives a graceful stop up to STOP_TIMEOUT
	wg      sync.WaitGroup
	flights chan *Flight // to the completer

	filling, spare *Batch // spare is nil while a POST reads it
	open           bool   // inside BEGIN … COMMIT
	openRows       bool   // the filling batch holds rows of the open transaction
	openRecs       int    // records of the open transaction decoded so far
	posting        bool   // a POST runs: at most one, in source order
	retracting     bool   // a retraction runs: nothing is in flight meanwhile
	// txnOpen: the last batch sent left a Feldera transaction open (it
	// ended inside a source transaction); the next one continues it.
	txnOpen bool
	txnTo   pglogrepl.LSN // the last COMMIT the open Feldera transaction carries: its progress row
	join    Join          // the Feldera transaction a crash left open, joined
	seq     int

	skip      ProgressSkip  // the source transactions Feldera holds already
	keepsRows bool          // the slot keeps behind the progress row
	rowDue    time.Time     // when a batch of the progress row alone may go next
	walEnd    pglogrepl.LSN // the highest WAL end a keepalive reported (QuietEnd)

	// Rows and bytes sent and not yet complete, per batch id and in all:
	// kept under what Feldera buffers per ingress endpoint (CanPost).
	flightSize  map[uint64][2]int
	flightRows  int
	flightBytes int
}

// MaxTxnFlight bounds the batches in flight inside one Feldera
// transaction (CanPost).
const MaxTxnFlight = 1024

// EventBuffer is the capacity an Emit channel needs so that no send
// blocks: each batch sends at most two events (posted, completed), at most
// MaxTxnFlight batches are in flight, and a retraction sends one.
const EventBuffer = 2*MaxTxnFlight + 4

// EventKind says what an Event reports.
type EventKind int

const (
	Posted    EventKind = iota + 1 // a POST ended: its batch's buffers are free again
	Completed                      // a batch in flight completed, or the completer failed
	Retracted                      // a retraction ended
)

// Event is what the Pipeline's goroutines report to the session loop,
// which hands it back to Apply.
type Event struct {
	Kind   EventKind
	Batch  *Batch // Posted
	ID     uint64 // the ledger's id of the batch
	Step   uint64 // Completed: the step that processed it; Retracted: the highest step of the retraction
	AckNow bool   // Posted in accepted mode: complete at the POST's answer
	Err    error
}

// NewPipeline is a session's sending side with routes Feldera tables,
// starting at the slot's confirmed position from under gate g; confirm
// (exactly_once) counts a completion only once a look at the pipeline
// found the session's process after it (Ledger). The exported fields are
// set before Start.
func NewPipeline(routes int, g Gate, from pglogrepl.LSN, confirm bool) *Pipeline {
	return &Pipeline{
		led:        NewLedger(g, from, confirm),
		filling:    NewBatch(routes),
		spare:      NewBatch(routes),
		flightSize: map[uint64][2]int{},
		flights:    make(chan *Flight, MaxTxnFlight+1),
	}
}

// Start starts k, the session's completer, under ctx, which the posters
// use too: it outlives a graceful stop up to STOP_TIMEOUT. The completer
// reads the batches the posters hand it, counts each complete one, and
// reports it through Emit. Wait joins it.
func (p *Pipeline) Start(ctx context.Context, k *Completer) {
	p.ctx = ctx
	k.In = p.flights
	k.Done = func(f *Flight, _ uint64) {
		p.Sender.Batches.Add(1)
		if !f.RowOnly {
			crashtest.Point("after_complete")
		}
	}
	k.Emit = func(d Completion) {
		p.Emit(Event{Kind: Completed, ID: d.ID, Step: d.Step, Err: d.Err})
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		k.Run(ctx)
	}()
}

// Wait joins every goroutine the Pipeline started: the completer, a
// poster, a retraction. The context given to Start must have ended.
func (p *Pipeline) Wait() { p.wg.Wait() }

// Filling is the batch the stream decodes into.
func (p *Pipeline) Filling() *Batch { return p.filling }

// Joined continues the Feldera transaction a crash left open
// (Transactions.Settle joined it): the replay goes on in it until the
// server's WAL end when the session began (Join).
func (p *Pipeline) Joined(until pglogrepl.LSN) { p.txnOpen, p.join.Until = true, until }

// TxnOpen reports whether a Feldera transaction stays open past the last
// batch sent.
func (p *Pipeline) TxnOpen() bool { return p.txnOpen }

// Open reports whether a source transaction is open.
func (p *Pipeline) Open() bool { return p.open }

// Begin applies a BEGIN whose commit record starts at final, and
// reports whether it ends the progress row's skip (the first source
// transaction Feldera lacks).
func (p *Pipeline) Begin(final pglogrepl.LSN) (skipEnded bool) {
	p.open, p.openRows, p.openRecs = true, false, 0
	return p.skip.Begin(final)
}

// Skipped is how many source transactions the skip passed, and the
// progress row's position it skips below.
func (p *Pipeline) Skipped() (int, pglogrepl.LSN) { return p.skip.Skipped, p.skip.Below }

// Drops reports whether the pgoutput message data is dropped undecoded:
// a change of a source transaction Feldera holds (ProgressSkip).
func (p *Pipeline) Drops(data []byte) bool { return p.skip.Drops(data) }

// Rows applies n records decoded into the filling batch for route.
func (p *Pipeline) Rows(route, n int, now time.Time) {
	p.openRows = p.openRows || p.open
	if p.open {
		p.openRecs += n
	}
	p.filling.Added(route, n, now)
}

// Commit applies a COMMIT ending at end. A COMMIT records how far a flush
// may move the position, or, with nothing buffered, moves it once what
// was sent before it is durable; it reports whether the position moved
// and whether it owes a publication (nothing buffered). A batch that
// holds rows of the transaction is marked multi when it had more than one
// record; an open Feldera transaction ends here when the replay no
// longer holds it, and with no linger the batch goes at once.
func (p *Pipeline) Commit(end pglogrepl.LSN, now time.Time) (moved, publish bool) {
	p.skip.Commit()
	p.open = false
	if p.openRecs > 1 && p.openRows {
		p.filling.Multi = true // its records are in this batch: whole, or the rest of it
	}
	buffered := p.filling.Total > 0
	moved = p.led.Committed(end, buffered, now)
	return moved, !buffered
}

// SealAtCommit reports whether the batch goes right after a COMMIT: with
// no linger, or when it ends a Feldera transaction the replay no longer
// holds.
func (p *Pipeline) SealAtCommit() bool {
	return (p.Linger == 0 && p.filling.Total > 0 || p.txnOpen && !p.joinHolds()) && p.CanPost()
}

// EndChunk applies a chunk's high watermark COMMIT: no source
// transaction is open.
func (p *Pipeline) EndChunk() { p.open = false }

// joinHolds reports whether the joined transaction must stay open past
// the filling batch (Join).
func (p *Pipeline) joinHolds() bool { return p.join.Holds(p.led.Recorded()) }

// Truncated drops the filling batch's rows of route: the source
// discarded them too.
func (p *Pipeline) Truncated(route int) {
	b := p.filling
	b.Total -= b.Rows[route]
	b.Rows[route] = 0
	b.Bufs[route] = b.Bufs[route][:0]
}

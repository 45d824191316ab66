package delivery

import (
	"fmt"
	"time"

	"github.com/pgfeldera/pgfeldera/crashtest"
)

// Batches in flight: the pipeline POSTs them in source order, one
// request at a time (never a POST before the previous one was answered,
// so Feldera queues them in commit order), and does not wait for
// completion before the next POST: up to BATCH_MAX_IN_FLIGHT batches
// have tokens outstanding at once. A batch in flight holds only its
// tokens; its rows are in Feldera, and a failure replays them from the
// slot. The Ledger decides what may be acknowledged.

// CanPost reports whether the filling batch may be sent now: no POST
// runs (one at a time keeps source order), no retraction, fewer than
// BATCH_MAX_IN_FLIGHT batches are in flight, and with it they stay within
// Feldera's ingress buffer.
func (p *Pipeline) CanPost() bool {
	if p.posting || p.retracting {
		return false
	}
	if p.txnOpen {
		// The batches of an open Feldera transaction complete only at
		// its commit, which the batch that ends the source transaction
		// asks for: they go on past BATCH_MAX_IN_FLIGHT (they hold only
		// tokens) and past the buffer bound (the transaction's steps
		// drain Feldera's buffer as usual), up to MaxTxnFlight.
		return p.led.InFlight() < MaxTxnFlight
	}
	if p.led.InFlight() >= p.MaxFlight {
		return false
	}
	return p.led.InFlight() == 0 ||
		p.flightRows+p.filling.Total <= QueueRecords && p.flightBytes+p.filling.Size() <= QueueBytes
}

// Full reports whether the filling batch reached a bound.
func (p *Pipeline) Full() bool { return p.Bounds.Full(p.filling) }

// LingerDeadline is when the filling batch is due by its linger, when
// that deadline applies: once it passes, FlushDue holds, so a receive
// bounded by it never ends before it reads without a flush following. A
// full batch, or one a table's last chunk marked (SealNow), waits inside
// a source transaction for the change that seals it or its COMMIT
// instead, and so does one that holds rows of the open transaction (see
// FlushDue): with the deadline past, every receive would end before it
// read, and the COMMIT would never come.
func (p *Pipeline) LingerDeadline() (time.Time, bool) {
	b := p.filling
	if b.Total == 0 || p.Bounds.Full(b) || b.SealNow || p.open && p.openRows || !p.CanPost() || p.Linger <= 0 {
		return time.Time{}, false
	}
	return b.First.Add(p.Linger), true
}

// FlushDue reports whether the filling batch should be sent now. The
// linger never seals a batch that holds rows of the open source
// transaction: nothing of it may be acknowledged, nor (inside the Feldera
// transaction that sealing it would need) shown, before its COMMIT, so
// sealing it early only adds a Feldera transaction per source one. The
// batch waits for the COMMIT, or for its bound.
func (p *Pipeline) FlushDue(now time.Time) bool {
	b := p.filling
	switch {
	case b.Total == 0:
		// A Feldera transaction left open by a batch that ended inside a
		// source transaction, which has ended since: commit it now,
		// unless it is one a crash left that the replay has not covered.
		// Or the progress row alone (RowOnlyAt).
		if p.txnOpen {
			return !p.open && !p.joinHolds()
		}
		at, ok := p.RowOnlyAt()
		return ok && !now.Before(at)
	case p.Bounds.Full(b):
		// Inside a transaction the next change seals it.
		return !p.open
	case p.Linger == 0 || b.SealNow:
		return !p.open
	case p.open && p.openRows:
		return false
	case p.txnOpen && !p.open && !p.joinHolds():
		// The batch ends the Feldera transaction at the source COMMIT
		// that came while a POST ran: it goes now, not at its linger.
		return true
	}
	return !now.Before(b.First.Add(p.Linger))
}

// RowOnlyAt is when the filling batch, holding no rows, goes out as the
// progress row alone: it carries positions the slot may not pass without
// the row (Ledger.KeepRows: COMMITs with nothing buffered, a quiet
// keepalive's WAL end). Nothing else is in flight, so at most one goes at
// a time, and one at most every status interval: an idle or filtered
// source costs one small Feldera transaction per status update that moves
// the position.
func (p *Pipeline) RowOnlyAt() (time.Time, bool) {
	if p.Sender.Progress == nil || p.filling.Total > 0 || p.open || p.txnOpen || p.Busy() || !p.led.RowOwed() {
		return time.Time{}, false
	}
	return p.rowDue, true
}

// mode is the session's FELDERA_TRANSACTIONS: with the progress row,
// every flush is a Feldera transaction that ends with it.
func (p *Pipeline) mode() string {
	if p.Sender.Progress != nil {
		return TxnAlways
	}
	return p.Mode
}

// Seal hands the filling batch to a poster: its POSTs run in a goroutine
// while the stream reads on; once they are answered its buffers come back
// as the spare and its tokens go to the completer. end commits a Feldera
// transaction the batch continues even inside a source transaction (a
// TRUNCATE, a stop: they need everything sent complete).
func (p *Pipeline) Seal(end bool) {
	b := p.filling
	// A batch sealed inside a source transaction splits it only when it
	// holds some of its rows: one sealed (by the linger) after a BEGIN
	// whose rows have not come yet holds whole transactions, and needs no
	// Feldera transaction (an incremental snapshot's watermark
	// transactions, which carry no rows, hit that at every chunk).
	spans := p.open && p.openRows && !end
	if p.Sealed != nil {
		b.Through = p.Sealed(p.open && p.openRows)
	}
	p.openRows = false
	if !spans && !end && p.txnOpen && p.joinHolds() {
		spans = true // the joined transaction goes on (Join)
	}
	spans = p.cutLarge(spans)
	plan := PlanTxn(p.mode(), p.txnOpen, spans, b.Multi, b.Tables())
	p.txnOpen = plan.In && !plan.End
	// The progress row alone (RowOnlyAt) passes no crash point: the
	// crash matrix numbers batches of rows.
	rowOnly := b.Total == 0 && plan.Begin && !end
	if !rowOnly {
		crashtest.Point("after_decode")
	}
	p.seq++
	p.filling = p.spare
	p.filling.Reset(p.seq)
	p.spare = nil
	now := time.Now()
	var id uint64
	id, b.AckTo = p.led.Seal(now)
	p.carry(plan, b)
	if b.Total == 0 && plan.End {
		p.rowDue = now.Add(p.Interval)
	}
	p.post(b, plan, id, rowOnly)
}

// cutLarge ends the open Feldera transaction at this batch when the
// source transaction outgrew what one Feldera transaction may keep in
// flight: what was sent commits, and the rest goes on in a new one.
func (p *Pipeline) cutLarge(spans bool) bool {
	if !spans || !p.txnOpen || p.led.InFlight() < MaxTxnFlight-1 {
		return spans
	}
	p.Sender.Txns.NotePart(0, fmt.Sprintf("a source transaction is larger than one Feldera transaction may hold in flight (%d batches of up to BATCH_MAX_ROWS=%d): committed in parts", MaxTxnFlight, p.Bounds.Rows))
	return false
}

// carry records the COMMIT a sealed batch b carries in the Feldera
// transaction its plan puts it in: the batch that ends the transaction
// writes the last of them in the progress row (Batch.Progress), and ends
// a joined transaction's hold.
func (p *Pipeline) carry(plan TxnPlan, b *Batch) {
	if plan.In {
		p.txnTo = max(p.txnTo, b.AckTo)
	}
	if plan.End {
		b.Progress, p.txnTo = p.txnTo, 0
		p.join.Ended()
	}
}

// post hands sealed batch b, ledger id, to a poster goroutine: its POSTs
// under plan, then its tokens to the completer. A batch of the progress
// row alone (rowOnly) passes no crash point.
func (p *Pipeline) post(b *Batch, plan TxnPlan, id uint64, rowOnly bool) {
	sz := [2]int{b.Total, b.Size()}
	p.flightSize[id] = sz
	p.flightRows += sz[0]
	p.flightBytes += sz[1]
	p.posting = true
	p.flushSince()
	accepted := p.Accepted
	ctx := p.ctx
	if rowOnly {
		ctx = crashtest.Quiet(ctx)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tokens, start, mark, err := p.Sender.Send(ctx, p.Targets, b, plan)
		if err == nil {
			crashtest.PointIn(ctx, "after_post")
			if !accepted {
				p.flights <- &Flight{ID: id, Seq: b.Seq, Rows: b.Total, Tokens: tokens, Start: start, Sent: time.Now(), Txn: mark, RowOnly: rowOnly}
			} else {
				p.Sender.Batches.Add(1)
				p.Sender.Observer.Batch(b.Total, time.Since(start), 0)
			}
		}
		p.Emit(Event{Kind: Posted, Batch: b, ID: id, AckNow: accepted, Err: err})
	}()
}

// landed forgets the size of a batch that completed.
func (p *Pipeline) landed(id uint64) {
	if sz, ok := p.flightSize[id]; ok {
		p.flightRows -= sz[0]
		p.flightBytes -= sz[1]
		delete(p.flightSize, id)
	}
}

// flushSince tells the readiness check since when the oldest work in
// flight waits.
func (p *Pipeline) flushSince() {
	if at, ok := p.led.OldestOpen(); ok {
		p.Sender.FlushSince.Store(at.UnixNano())
	} else {
		p.Sender.FlushSince.Store(0)
	}
}

package connector

import (
	"time"

	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/delivery"
)

// bounds are the outbox batches' bounds (BATCH_MAX_ROWS, BATCH_MAX_BYTES).
func (c *Connector) bounds() delivery.Bounds {
	return delivery.Bounds{Rows: c.cfg.BatchMaxRows, Bytes: c.cfg.BatchMaxBytes}
}

// canPost reports whether the filling batch may be sent now: no POST
// runs (one at a time keeps source order), no retraction, fewer than
// BATCH_MAX_IN_FLIGHT batches are in flight, and with it they stay within
// Feldera's ingress buffer.
func (s *stream) canPost() bool {
	if s.posting || s.retracting {
		return false
	}
	if s.txnOpen {
		// The batches of an open Feldera transaction complete only at
		// its commit, which the batch that ends the source transaction
		// asks for: they go on past BATCH_MAX_IN_FLIGHT (they hold only
		// tokens) and past the buffer bound (the transaction's steps
		// drain Feldera's buffer as usual), up to maxTxnFlight.
		return s.led.InFlight() < maxTxnFlight
	}
	if s.led.InFlight() >= s.maxFlight {
		return false
	}
	return s.led.InFlight() == 0 ||
		s.flightRows+s.filling.Total <= delivery.QueueRecords && s.flightBytes+s.filling.Size() <= delivery.QueueBytes
}

// lingerDeadline is when the filling batch is due by its linger, when
// that deadline applies: once it passes, flushDue holds, so a receive
// bounded by it never ends before it reads without a flush following. A
// full batch, or one a table's last chunk marked (sealNow), waits inside
// a source transaction for the change that seals it or its COMMIT
// instead, and so does one that holds rows of the open transaction (see
// flushDue). (A sealNow batch once took the deadline too: inside a
// transaction, with the deadline past, every receive ended before it
// read, the COMMIT never came, and the snapshot never completed.)
func (s *stream) lingerDeadline() (time.Time, bool) {
	b := s.filling
	if b.Total == 0 || s.c.bounds().Full(b) || b.SealNow || s.open && s.openRows || !s.canPost() || s.c.cfg.BatchLinger <= 0 {
		return time.Time{}, false
	}
	return b.First.Add(s.c.cfg.BatchLinger), true
}

// flushDue reports whether the filling batch should be sent now. The
// linger never seals a batch that holds rows of the open source
// transaction: nothing of it may be acknowledged, nor (inside the Feldera
// transaction that sealing it would need) shown, before its COMMIT, so
// sealing it early only adds a Feldera transaction per source one. The
// batch waits for the COMMIT, or for its bound.
func (s *stream) flushDue(now time.Time) bool {
	b := s.filling
	switch {
	case b.Total == 0:
		// A Feldera transaction left open by a batch that ended inside a
		// source transaction, which has ended since: commit it now,
		// unless it is one a crash left that the replay has not covered.
		// Or the progress row alone (skip.go).
		if s.txnOpen {
			return !s.open && !s.joinHolds()
		}
		at, ok := s.rowOnlyAt()
		return ok && !now.Before(at)
	case s.c.bounds().Full(b):
		// Inside a transaction the next change seals it (see handle).
		return !s.open
	case s.c.cfg.BatchLinger == 0 || b.SealNow:
		return !s.open
	case s.open && s.openRows:
		return false
	case s.txnOpen && !s.open && !s.joinHolds():
		// The batch ends the Feldera transaction at the source COMMIT
		// that came while a POST ran: it goes now, not at its linger.
		return true
	}
	return !now.Before(b.First.Add(s.c.cfg.BatchLinger))
}

// startFlush hands the filling batch to the poster: its POSTs run in a
// goroutine while the stream reads on; once they are answered its buffers
// come back as the spare and its tokens go to the completer. end commits
// a Feldera transaction the batch continues even inside a source
// transaction (a TRUNCATE, a stop: they need everything sent complete).
func (s *stream) startFlush(end bool) {
	b := s.filling
	// A batch sealed inside a source transaction splits it only when it
	// holds some of its rows: one sealed (by the linger) after a BEGIN
	// whose rows have not come yet holds whole transactions, and needs no
	// Feldera transaction (an incremental snapshot's watermark
	// transactions, which carry no rows, hit that at every chunk).
	spans := s.open && s.openRows && !end
	s.noteSent(s.open && s.openRows)
	s.openRows = false
	if !spans && !end && s.txnOpen && s.joinHolds() {
		spans = true // the joined transaction goes on (delivery.Join)
	}
	if spans && s.txnOpen && s.led.InFlight() >= maxTxnFlight-1 {
		// The source transaction outgrew what one Feldera transaction may
		// keep in flight: commit what was sent, and go on in a new one.
		spans = false
		if !s.warnedTxnCut {
			s.warnedTxnCut = true
			s.logger.Warn("flush: a source transaction is larger than one Feldera transaction may hold in flight; committing it in Feldera in parts (views see the parts)",
				"batches", maxTxnFlight, "batch_max_rows", s.c.cfg.BatchMaxRows)
		}
	}
	plan := delivery.PlanTxn(s.txnMode(), s.txnOpen, spans, b.Multi, b.Tables())
	s.txnOpen = plan.In && !plan.End
	// The progress row alone (rowOnlyAt) passes no crash point: the
	// crash matrix numbers batches of rows.
	rowOnly := b.Total == 0 && plan.Begin && !end
	if !rowOnly {
		crashtest.Point("after_decode")
	}
	s.seq++
	s.filling = s.spare
	s.filling.Reset(s.seq)
	s.spare = nil
	now := time.Now()
	var id uint64
	id, b.AckTo = s.led.Seal(now)
	s.carry(plan, b)
	if b.Total == 0 && plan.End {
		s.rowDue = now.Add(s.interval)
	}
	s.post(b, plan, id, rowOnly)
}

// post hands sealed batch b, ledger id, to a poster goroutine: its POSTs
// under plan, then its tokens to the completer. A batch of the progress
// row alone (rowOnly) passes no crash point.
func (s *stream) post(b *delivery.Batch, plan delivery.TxnPlan, id uint64, rowOnly bool) {
	sz := [2]int{b.Total, b.Size()}
	s.flightSize[id] = sz
	s.flightRows += sz[0]
	s.flightBytes += sz[1]
	s.posting = true
	s.setFlushSince()
	accepted := s.c.cfg.AckMode == AckAccepted
	ctx := s.flushCtx
	if rowOnly {
		ctx = crashtest.Quiet(ctx)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tokens, start, mark, err := s.c.out.Send(ctx, s.targets, b, plan)
		if err == nil {
			crashtest.PointIn(ctx, "after_post")
			if !accepted {
				s.flights <- &delivery.Flight{ID: id, Seq: b.Seq, Rows: b.Total, Tokens: tokens, Start: start, Sent: time.Now(), Txn: mark, RowOnly: rowOnly}
			} else {
				s.c.stats.Batches.Add(1)
				s.c.observer.Batch(b.Total, time.Since(start), 0)
			}
		}
		s.emit(event{kind: evPosted, b: b, id: id, ackNow: accepted, err: err})
	}()
}

// carry records the COMMIT a sealed batch b carries in the Feldera
// transaction its plan puts it in: the batch that ends the transaction
// writes the last of them in the progress row (Batch.Progress), and ends
// a joined transaction's hold.
func (s *stream) carry(plan delivery.TxnPlan, b *delivery.Batch) {
	if plan.In {
		s.txnTo = max(s.txnTo, b.AckTo)
	}
	if plan.End {
		b.Progress, s.txnTo = s.txnTo, 0
		s.join.Ended()
	}
}

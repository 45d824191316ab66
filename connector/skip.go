package connector

import (
	"context"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/outbox"
	"github.com/pgfeldera/pgfeldera/setup"
)

// Exactly once into Feldera (FELDERA_PROGRESS_TABLE, outbox.Progress):
// every Feldera transaction the stream commits ends with the slot's row
// in the progress table, and a session that finds the row ahead of the
// slot skips, whole, every source transaction Feldera holds
// (outbox.Skip).
//
// The skipped transactions' COMMITs reach the ledger as COMMITs with
// nothing buffered: under the completion gate, what Feldera completed is
// durable (exactly_once) or lost with all of Feldera's state (no fault
// tolerance, which a restart resnapshots), so they are acknowledged at
// once. The checkpoint gate does not use the row yet (setProgress).

// txnMode is the session's FELDERA_TRANSACTIONS: with the progress row,
// every flush is a Feldera transaction that ends with it.
func (s *stream) txnMode() string {
	if s.c.out.Progress != nil {
		return TxnAlways
	}
	return s.c.cfg.Transactions
}

// setProgress sets the Sender's progress row for the session p plans,
// and reports whether there is one. Under the checkpoint gate
// (at_least_once) none is used yet: the row a session reads may be in
// Feldera's state and in no checkpoint, and the step a skip would have to
// wait for is not known without a write that a Feldera restart in between
// could plant in an older state (docs/exactly-once-design.md).
func (c *Connector) setProgress(p *setup.Plan) bool {
	c.out.Progress = nil
	why := ""
	switch {
	case p.Progress != nil && p.Gate == GateCheckpoint:
		why = "the pipeline's fault tolerance is at_least_once, under which the progress table is not used yet"
	case p.Progress != nil:
		c.out.Progress = &outbox.Progress{Table: p.Progress.CanonicalName(), Slot: c.cfg.Slot}
		return true
	case c.cfg.ProgressTable == setup.ProgressOff:
		why = "the progress table is off (FELDERA_PROGRESS_TABLE=off, the default, or FELDERA_TRANSACTIONS=off)"
	default:
		why = "the pipeline declares no progress table (" + setup.ProgressTable + "; `pgfeldera ddl` prints it)"
	}
	if !c.saidProgress {
		c.saidProgress = true
		c.logger.Info("progress: " + why + ": after a restart pgfeldera replays from the slot what Feldera may hold already (at least once)")
	}
	return false
}

// readProgress reads the session's progress row: the position the session
// skips below (0: none).
func (c *Connector) readProgress(ctx context.Context, p *setup.Plan) (pglogrepl.LSN, error) {
	if c.out.Progress == nil {
		return 0, nil
	}
	lsn, found, err := c.out.ReadProgress(ctx)
	if err != nil || !found {
		return 0, err
	}
	switch {
	case lsn <= c.acked || c.test.noSkip:
		return 0, nil // the slot is there already: nothing to skip
	case lsn > c.srv.WALEnd && !c.test.noWALEndGuard:
		// Past everything the server wrote: a position of another history
		// (a failover the start did not see). Nothing is skipped.
		c.logger.Warn("progress: the progress row lies past the server's WAL end, so it belongs to another history (a failover?): nothing is skipped, and the slot replays", "progress_lsn", lsn, "wal_end", c.srv.WALEnd)
		return 0, nil
	}
	c.logger.Info("progress: Feldera holds the source transactions up to the progress row, past the slot's position: skipping them", "progress_lsn", lsn, "confirmed_flush_lsn", c.acked)
	return lsn, nil
}

// skipAt applies a BEGIN or a COMMIT to the skip (outbox.Skip).
func (s *stream) skipAt(ev *decode.Event) {
	switch ev.Kind {
	case decode.KindBegin:
		if below := s.skip.Below; s.skip.Begin(ev.Begin.FinalLSN) {
			s.logger.Info("progress: skipped the source transactions Feldera held; streaming", "transactions", s.skip.Skipped, "progress_lsn", below)
		}
	case decode.KindCommit:
		s.skip.Commit()
	}
}

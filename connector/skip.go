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
// nothing buffered. Under the checkpoint gate the row may be in
// Feldera's state and not yet in a checkpoint, so the session writes the
// row again before it streams (Sender.PutProgress): the step that
// completes it enters the step watermark, and nothing skipped is
// acknowledged before a checkpoint covers it.

// txnMode is the session's FELDERA_TRANSACTIONS: with the progress row,
// every flush is a Feldera transaction that ends with it.
func (s *stream) txnMode() string {
	if s.c.out.Progress != nil {
		return TxnAlways
	}
	return s.c.cfg.Transactions
}

// setProgress sets the Sender's progress row for the session p plans,
// and reports whether there is one.
func (c *Connector) setProgress(p *setup.Plan) bool {
	if p.Progress == nil {
		c.out.Progress = nil
		if !c.saidProgress {
			c.saidProgress = true
			why := "the pipeline declares no progress table (" + setup.ProgressTable + "; `pgfeldera ddl` prints it)"
			if c.cfg.ProgressTable == setup.ProgressOff {
				why = "the progress table is off (FELDERA_PROGRESS_TABLE=off, or FELDERA_TRANSACTIONS=off)"
			}
			c.logger.Info("progress: " + why + ": after a restart pgfeldera replays from the slot what Feldera may hold already (at least once)")
		}
		return false
	}
	c.out.Progress = &outbox.Progress{Table: p.Progress.CanonicalName(), Slot: c.cfg.Slot}
	return true
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
	if lsn <= c.acked || c.test.noSkip {
		return 0, nil // the slot is there already: nothing to skip
	}
	c.logger.Info("progress: Feldera holds the source transactions up to the progress row, past the slot's position: skipping them", "progress_lsn", lsn, "confirmed_flush_lsn", c.acked)
	if p.Gate == GateCheckpoint {
		if err := c.out.PutProgress(ctx, lsn); err != nil {
			return 0, err
		}
	}
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

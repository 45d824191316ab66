package connector

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/outbox"
	"github.com/pgfeldera/pgfeldera/setup"
)

// Exactly once into Feldera (FELDERA_PROGRESS_TABLE, outbox.Progress):
// every Feldera transaction the stream commits ends with the slot's row
// in the progress table, and a session that finds the row ahead of the
// slot skips, whole, every source transaction Feldera holds. A commit
// record starting below the row's position ends at or below it (commit
// records do not overlap, and the row holds a commit's end), so it is
// Feldera's; one starting at it or later is not. Skipped rows are never
// decoded: they go nowhere, and change nothing the session keeps.
//
// The skipped transactions' COMMITs reach the ledger as COMMITs with
// nothing buffered. Under the checkpoint gate the row may be in
// Feldera's state and not yet in a checkpoint, so the session writes the
// row again before it streams (Sender.PutProgress): the step that
// completes it enters the step watermark, and nothing skipped is
// acknowledged before a checkpoint covers it.

// progressDefaults checks FELDERA_PROGRESS_TABLE against
// FELDERA_TRANSACTIONS: the row is written inside Feldera transactions,
// so "on" refuses transactions off, and "auto" is off with them.
func progressDefaults(cfg *Config) error {
	switch cfg.ProgressTable {
	case "":
		cfg.ProgressTable = setup.ProgressAuto
	case setup.ProgressAuto, setup.ProgressOn, setup.ProgressOff:
	default:
		return fmt.Errorf("connector: FELDERA_PROGRESS_TABLE=%q: want auto, on or off", cfg.ProgressTable)
	}
	if cfg.Transactions != TxnOff {
		return nil
	}
	if cfg.ProgressTable == setup.ProgressOn {
		return errors.New("connector: FELDERA_PROGRESS_TABLE=on writes the progress row inside Feldera transactions, which FELDERA_TRANSACTIONS=off turns off: set one of them otherwise")
	}
	cfg.ProgressTable = setup.ProgressOff
	return nil
}

// txnMode is the session's FELDERA_TRANSACTIONS: with the progress row,
// every flush is a Feldera transaction that ends with it.
func (s *stream) txnMode() string {
	if s.c.out.Progress != nil {
		return TxnAlways
	}
	return s.c.cfg.Transactions
}

// useProgress sets the Sender's progress row for the session p plans and
// reads it: the position the session skips below (0: none).
func (c *Connector) useProgress(ctx context.Context, p *setup.Plan) (pglogrepl.LSN, error) {
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
		return 0, nil
	}
	c.out.Progress = &outbox.Progress{Table: p.Progress.CanonicalName(), Slot: c.cfg.Slot}
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

// skips reports whether the message data belongs to a transaction the
// session skips: its changes and TRUNCATEs are not decoded.
func (s *stream) skips(data []byte) bool {
	if !s.skipping || len(data) == 0 {
		return false
	}
	switch data[0] {
	case decode.MsgInsert, decode.MsgUpdate, decode.MsgDelete, decode.MsgTruncate:
		return true
	}
	return false
}

// skipAt applies a BEGIN or a COMMIT to the skip: a BEGIN whose commit
// starts below skipBelow opens a skipped transaction, the first that
// does not ends the skip.
func (s *stream) skipAt(ev *decode.Event) {
	switch {
	case s.skipBelow == 0:
	case ev.Kind == decode.KindBegin && ev.Begin.FinalLSN < s.skipBelow:
		s.skipping = true
	case ev.Kind == decode.KindBegin:
		s.logger.Info("progress: skipped the source transactions Feldera held; streaming", "transactions", s.skipped, "progress_lsn", s.skipBelow)
		s.skipBelow = 0
	case ev.Kind == decode.KindCommit && s.skipping:
		s.skipping = false
		s.skipped++
	}
}

package connector

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/setup"
)

// Exactly once into Feldera (FELDERA_PROGRESS_TABLE, delivery.Progress):
// every Feldera transaction the stream commits ends with the slot's row
// in the progress table, and a session that finds the row ahead of the
// slot skips, whole, every source transaction Feldera holds
// (delivery.ProgressSkip).
//
// The skipped transactions' COMMITs reach the ledger as COMMITs with
// nothing buffered, acknowledged as the gate says. Under the completion
// gate, what Feldera completed is durable (exactly_once) or lost with all
// of Feldera's state (no fault tolerance, which a restart resnapshots),
// so they are acknowledged at once. Under the checkpoint gate
// (at_least_once) the row may be in Feldera's state and in no checkpoint
// yet: the session's step watermark is raised to the steps Feldera had
// begun when the row was read (progressStep), so they wait for a
// checkpoint of that process that holds it.

// setProgress sets the Sender's progress row for the session p plans,
// and reports whether there is one.
func (c *Connector) setProgress(p *setup.Plan) bool {
	c.out.Progress = nil
	why := ""
	switch {
	case p.Progress != nil:
		c.out.Progress = &delivery.Progress{Table: p.Progress.CanonicalName(), Slot: c.cfg.Slot}
		if !c.saidProgress {
			c.saidProgress = true
			c.logger.Info("progress: the pipeline declares " + setup.ProgressTable + ": every flush commits this source's position with its rows, and a restart skips what Feldera holds (exactly once)")
		}
		return true
	case c.cfg.ProgressTable == setup.ProgressOff:
		why = "the progress table is off (FELDERA_PROGRESS_TABLE=off, or FELDERA_TRANSACTIONS=off)"
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
	if err != nil {
		return 0, err
	}
	if lsn > c.srv.WALEnd && !c.test.NoWALEndGuard && !c.txns.RowOurs(lsn) {
		// Past everything the server wrote: a position of another history
		// (a failover the start did not see), unless this process wrote
		// it (the snapshot's row, at a slot created after the WAL end was
		// read). Nothing is skipped.
		c.logger.Warn("progress: the progress row lies past the server's WAL end, so it belongs to another history (a failover?): nothing is skipped, and the slot replays", "progress_lsn", lsn, "wal_end", c.srv.WALEnd)
		return 0, c.txns.Resume(0, false)
	}
	// What Feldera holds past the row is counted from it
	// (delivery/txncount.go), when the replay starts there. With no row,
	// or one cleared (0), the replay starts at the slot, and the slot
	// keeps there until a row is committed (Ledger.KeepRows): counted
	// from the slot's position, a crash inside the first transaction
	// sends none of what Feldera holds of it again.
	from := lsn
	if !found || lsn == 0 {
		from = c.acked
	}
	if err := c.txns.Resume(from, from >= c.acked); err != nil {
		return 0, err
	}
	if !found || lsn <= c.acked || c.test.NoSkip {
		return 0, nil // the slot is there already: nothing to skip
	}
	if p.Gate == delivery.GateCheckpoint && !c.test.NoProgressStep {
		step, err := c.progressStep(ctx, p)
		if err != nil {
			return 0, err
		}
		c.out.RaiseSyncStep(step)
	}
	c.logger.Info("progress: Feldera holds the source transactions up to the progress row, past the slot's position: skipping them", "progress_lsn", lsn, "confirmed_flush_lsn", c.acked)
	return lsn, nil
}

// progressStep is the step count a checkpoint must reach to hold the
// progress row just read: /stats's total_initiated_steps, read after the
// query, counts the step that made the row visible. It counts only in the
// process the session feeds: a restart between the plan and the read
// restores a checkpoint whose step count starts lower, so a changed
// incarnation ends the session, which reads the row again.
func (c *Connector) progressStep(ctx context.Context, p *setup.Plan) (uint64, error) {
	st, err := c.sink.Stats(ctx)
	if err != nil {
		return 0, fmt.Errorf("progress: reading the step count after the progress row: %w", err)
	}
	if now := st.GlobalMetrics.IncarnationUUID; p.Incarnation == "" || now != p.Incarnation {
		return 0, fromFeldera(fmt.Errorf("progress: the feldera pipeline restarted while the progress row was read (incarnation %q → %q): reading it again", p.Incarnation, now))
	}
	return st.GlobalMetrics.TotalInitiatedSteps, nil
}

// skipBelow starts the session's skip at the progress row's position at
// (0: none), and with the row, keeps the slot from passing it. A session
// that does not keep it clears the state's mark that it is kept, before
// it acknowledges anything (state.State.ProgressKept).
func (s *stream) skipBelow(at pglogrepl.LSN) error {
	if s.pipe.SkipBelow(at, !s.c.test.NoKeepRows) {
		return nil
	}
	if s.inc != nil {
		return s.inc.KeepProgress(false, "")
	}
	return nil
}

// markKept records, before the first status update of the session that
// moves the slot, that the slot keeps behind the progress row: from then
// on a row below the slot means Feldera lost acknowledged data
// (setup.ProgressLost). Before it, the slot may lie past the row (turned
// on with a slot already confirmed, or cleared), and the first position
// the session acknowledges is one a row carries.
func (s *stream) markKept() error {
	if !s.pipe.KeepsRows() || s.markedKept || s.inc == nil || s.c.acked <= s.sentAck {
		return nil
	}
	if err := s.inc.KeepProgress(true, setup.Fingerprint(*s.plan.Progress)); err != nil {
		return err
	}
	s.markedKept = true
	return nil
}

// quietEnd applies, with the progress row, the last keepalive's WAL end
// once the session is quiet (delivery.Pipeline.QuietEnd).
func (s *stream) quietEnd(now time.Time) error {
	if s.pipe.QuietEnd(now) {
		return s.ack(true)
	}
	return nil
}

// joinTables is what Settle joins a transaction left open with: every
// table the session POSTs to, the progress table included, or nil when
// it must commit it instead. A replay into the transaction a prefix P
// sits in is harmless where it cannot duplicate: with the progress row
// (what Feldera holds past it is counted, not sent again), or when every
// table is keyed (the replay S starts with P, and each key P touched
// gets its last value from S). A keyless table without the row would
// get P twice, committed or joined: it is committed, as before.
func (c *Connector) joinTables(p *setup.Plan, progress bool) map[string]bool {
	if c.test.NoJoin || !progress && !allKeyed(p) {
		return nil
	}
	tables := map[string]bool{}
	if progress {
		tables[c.out.Progress.Table] = true
	}
	for _, t := range p.Routes {
		tables[t.Dest.CanonicalName()] = true
	}
	return tables
}

// allKeyed reports whether every table of the plan has a primary key in
// Feldera (a plan without tables has none).
func allKeyed(p *setup.Plan) bool {
	if len(p.Rels) == 0 {
		return false
	}
	for _, r := range p.Rels {
		if !r.Keyed() {
			return false
		}
	}
	return true
}

// countPast sets what the session counts past the progress row
// (delivery/txncount.go): with the table every table, until a chunk of it
// goes out (Transactions.Uncount); the session owns the map. Without the
// table the slot moves past the row, so what was counted past it no
// longer says where a replay starts: it is forgotten.
func (c *Connector) countPast(p *setup.Plan, progress bool) error {
	c.txns.Counted = nil
	if !progress {
		return c.txns.ForgetPast()
	}
	if c.test.NoCount {
		return nil
	}
	c.txns.Counted = map[string]bool{}
	for _, t := range p.Routes {
		c.txns.Counted[t.Dest.CanonicalName()] = true
	}
	return nil
}

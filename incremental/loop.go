package incremental

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/state"
)

// Event is the loop's side of every decoded event while an incremental
// snapshot runs: it remembers which transactions changed a table still to
// read (for the xip rule), feeds the open window the keys of its table,
// poisons it on a TRUNCATE of that table, and handles the watermarks. At
// a high watermark's COMMIT it returns the chunk whose kept rows the
// stream appends to its outbox there (then Appended).
func (inc *Session) Event(ev *decode.Event) (*Chunk, error) {
	l := inc.loop
	switch ev.Kind {
	case decode.KindBegin:
		l.Begin(ev.Begin.Xid, ev.Begin.FinalLSN)
	case decode.KindRows:
		l.Rows(ev.Route, ev.Keys, ev.KeyUnknown)
	case decode.KindTruncate:
		for _, r := range ev.Truncated {
			l.Truncated(r.Target.Route)
		}
	case decode.KindCommit:
		return l.Commit(ev.Commit.CommitLSN, ev.Commit.EndLSN), nil
	case decode.KindMessage:
		if ev.Message.Prefix == WatermarkPrefix {
			return nil, inc.message(ev.Message)
		}
	}
	return nil, nil
}

func (inc *Session) message(m decode.Message) error {
	var w Watermark
	if err := json.Unmarshal(m.Content, &w); err != nil {
		inc.cfg.Logger.Warn("snapshot: incremental: ignoring a logical message with prefix "+WatermarkPrefix+" that is neither a watermark nor a request", "lsn", m.LSN, "err", err)
		return nil
	}
	if w.Slot != inc.cfg.Slot {
		return nil // another connector's
	}
	if w.Resnapshot != "" {
		return inc.request(w, m.LSN)
	}
	if w.Run != inc.hand.Run() {
		return nil // an earlier session's, replayed
	}
	switch w.W {
	case "low":
		t := inc.table(w.Table)
		if t == nil {
			return fmt.Errorf("incremental snapshot: low watermark of chunk %d names table %d, which this snapshot does not read", w.Chunk, w.Table)
		}
		if err := inc.loop.Low(w.Chunk, t.Rel.Target.Route); err != nil {
			return err
		}
		inc.stream.WantKeys[t.Rel.Target.Route] = true
	case "high":
		return inc.highWatermark(w.Chunk)
	}
	return nil
}

// highWatermark closes the window: the chunk is read again when the
// window cannot be trusted, else its kept rows enter the outbox at the
// watermark's COMMIT (Event), so that the batches they fill end between
// source transactions.
func (inc *Session) highWatermark(seq uint64) error {
	ch := inc.hand.Taken(seq)
	route := inc.loop.RouteOf(seq)
	why, err := inc.loop.High(seq, ch, inc.cfg.Hooks.Get().NoWindow)
	if err != nil {
		return err
	}
	inc.stream.WantKeys[route] = inc.loop.Watching(route)
	if why != "" && !ch.Discard {
		inc.rec.Retries++
		what := "chunk"
		if ch.Retract {
			what = "retraction batch"
		}
		inc.cfg.Logger.Info("snapshot: incremental: reading a "+what+" again", "table", ch.Table.Rel.Target.Qualified(), "chunk", ch.Seq, "why", why)
	}
	ch.Answer(why != "")
	if why != "" {
		inc.hand.Recycle(ch) // the lane reads it again, or drops it
	}
	return nil
}

// Appended counts a chunk the outbox took and frees its buffers.
func (inc *Session) Appended(ch *Chunk) error {
	route := ch.Table.Rel.Target.Route
	kept := int64(len(ch.Ends))
	inc.hand.Recycle(ch)
	if ch.Retract {
		inc.cfg.Retracted.Add(kept)
		return nil
	}
	inc.cfg.SnapshotRows.Add(kept)
	inc.cfg.Copied(route).Add(kept)
	ch.Table.Copied += kept
	return nil
}

// Save records in the state each chunk the acknowledged position (acked)
// passed (incremental.Recorder), and forgets the tables read whole.
func (inc *Session) Save(acked pglogrepl.LSN, force bool) error {
	read, err := inc.rec.Save(inc.loop.Due(acked), force)
	for _, ct := range read {
		inc.tables = slices.DeleteFunc(inc.tables, func(x *Table) bool { return x == ct })
	}
	return err
}

// Checkpoint records cp, the session's newest fresh checkpoint, in the
// state file, unless the state records it already; gap says the state
// recorded a journal gap (a program change under exactly_once), which
// this write closes.
func (inc *Session) Checkpoint(cp *state.CheckpointRef) (gap bool, err error) {
	if inc.rec.St.Checkpoint != nil && inc.rec.St.Checkpoint.UUID == cp.UUID {
		return false, nil
	}
	st := inc.rec.St
	st.Checkpoint = cp
	gap = st.JournalGap != ""
	st.JournalGap = ""
	if err := inc.rec.Write(); err != nil {
		return false, err
	}
	return gap, nil
}

// KeepProgress records whether the slot keeps behind the progress row
// (state.State.ProgressKept) and, kept, the progress table's definition
// (fingerprint), unless the state records them already.
func (inc *Session) KeepProgress(kept bool, fingerprint string) error {
	if inc.rec.St.ProgressKept == kept && (!kept || inc.rec.St.ProgressFingerprint == fingerprint) {
		return nil
	}
	inc.rec.St.ProgressKept = kept
	if kept {
		inc.rec.St.ProgressFingerprint = fingerprint
	}
	return inc.rec.Write()
}

package connector

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/incremental"
)

// incEvent is the loop's side of every decoded event while an incremental
// snapshot runs: it remembers which transactions changed a table still to
// read (for the xip rule), feeds the open window the keys of its table,
// poisons it on a TRUNCATE of that table, and handles the watermarks.
func (s *stream) incEvent(ev *decode.Event) error {
	l := s.inc.loop
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
		if ch := l.Commit(ev.Commit.CommitLSN, ev.Commit.EndLSN); ch != nil {
			return s.appendChunk(ch)
		}
	case decode.KindMessage:
		if ev.Message.Prefix == incremental.WatermarkPrefix {
			return s.message(ev.Message)
		}
	}
	return nil
}

func (s *stream) message(m decode.Message) error {
	inc := s.inc
	var w incremental.Watermark
	if err := json.Unmarshal(m.Content, &w); err != nil {
		s.logger.Warn("snapshot: incremental: ignoring a logical message with prefix "+incremental.WatermarkPrefix+" that is neither a watermark nor a request", "lsn", m.LSN, "err", err)
		return nil
	}
	if w.Slot != s.c.cfg.Slot {
		return nil // another connector's
	}
	if w.Resnapshot != "" {
		return s.request(w, m.LSN)
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
		s.dec.WantKeys[t.Rel.Target.Route] = true
	case "high":
		return s.highWatermark(w.Chunk)
	}
	return nil
}

// highWatermark closes the window: the chunk is read again when the
// window cannot be trusted, else its kept rows enter the outbox at the
// watermark's COMMIT (incEvent), so that the batches they fill end
// between source transactions.
func (s *stream) highWatermark(seq uint64) error {
	inc := s.inc
	ch := inc.hand.Taken(seq)
	route := inc.loop.RouteOf(seq)
	why, err := inc.loop.High(seq, ch, s.c.test.noWindow)
	if err != nil {
		return err
	}
	s.dec.WantKeys[route] = inc.loop.Watching(route)
	if why != "" && !ch.Discard {
		inc.rec.Retries++
		what := "chunk"
		if ch.Retract {
			what = "retraction batch"
		}
		s.logger.Info("snapshot: incremental: reading a "+what+" again", "table", ch.Table.Rel.Target.Qualified(), "chunk", ch.Seq, "why", why)
	}
	ch.Answer(why != "")
	if why != "" {
		s.inc.hand.Recycle(ch) // the lane reads it again, or drops it
	}
	return nil
}

// appendChunk adds a chunk's kept rows to the outbox at its high
// watermark's COMMIT, after every change before it. The watermark's
// transaction holds nothing else, so the batches the rows fill are sealed
// at the usual bounds (BATCH_MAX_ROWS, BATCH_MAX_BYTES) as between source
// transactions; only the last one carries the COMMIT's position.
func (s *stream) appendChunk(ch *incremental.Chunk) error {
	s.open = false
	route := ch.Table.Rel.Target.Route
	now := time.Now()
	if s.filling.Total == 0 && len(ch.Ends) > 0 && len(ch.Ends) <= s.c.cfg.BatchMaxRows && len(ch.Buf) <= s.c.cfg.BatchMaxBytes {
		// The chunk is one batch: its buffer becomes the batch's (no copy),
		// and the batch's empty one goes back to the pool with the chunk.
		s.filling.Bufs[route], ch.Buf = ch.Buf, s.filling.Bufs[route][:0]
		s.filling.Added(route, len(ch.Ends), now)
	} else if err := s.copyChunk(ch, route, now); err != nil {
		return err
	}
	if ch.Done && s.filling.Total > 0 {
		s.filling.SealNow = true
	}
	return s.chunkAppended(ch)
}

// copyChunk copies a chunk's rows into the outbox, sealing batches at
// their bounds: each batch takes, in one copy, the lines up to the one
// that reaches BATCH_MAX_ROWS or BATCH_MAX_BYTES (as the stream seals a
// batch after the change that reached a bound).
func (s *stream) copyChunk(ch *incremental.Chunk, route int, now time.Time) error {
	maxRows, maxBytes := s.c.cfg.BatchMaxRows, s.c.cfg.BatchMaxBytes
	for i, start := 0, 0; i < len(ch.Ends); {
		if s.c.bounds().Full(s.filling) {
			for !s.canPost() {
				if err := s.waitEvent(); err != nil {
					return err
				}
			}
			s.startFlush(false)
		}
		b := s.filling
		rows, size := b.Total, b.Size()
		j := i
		for j < len(ch.Ends)-1 && rows+j-i+1 < maxRows && size+ch.Ends[j]-start < maxBytes {
			j++
		}
		end := ch.Ends[j]
		b.Bufs[route] = append(b.Bufs[route], ch.Buf[start:end]...)
		b.Added(route, j-i+1, now)
		i, start = j+1, end
	}
	return nil
}

// chunkAppended counts a chunk the outbox took and frees its buffers.
func (s *stream) chunkAppended(ch *incremental.Chunk) error {
	route := ch.Table.Rel.Target.Route
	kept := int64(len(ch.Ends))
	s.inc.hand.Recycle(ch)
	if ch.Retract {
		s.c.stats.Retracted.Add(kept)
		return nil
	}
	s.c.stats.SnapshotRows.Add(kept)
	s.c.tableStats[route].Copied.Add(kept)
	ch.Table.Copied += kept
	return nil
}

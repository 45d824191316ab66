package connector

import (
	"time"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/incremental"
)

// incStream is what the incremental snapshot needs of the stream: the
// worker runs under the flush context, counted in the session's
// WaitGroup, and ends the session with a chunk event.
func (s *stream) incStream() incremental.Stream {
	return incremental.Stream{
		Ctx: s.flushCtx, WG: &s.wg, Wake: s.wake.fire, WantKeys: s.dec.WantKeys, Timeout: s.live.Timeout,
		Fail: func(err error) { s.emit(event{chunk: err}) },
	}
}

// incEvent hands a decoded event to the incremental snapshot
// (incremental.Session.Event), and appends the chunk it returns at a high
// watermark's COMMIT.
func (s *stream) incEvent(ev *decode.Event) error {
	ch, err := s.inc.Event(ev)
	if err != nil || ch == nil {
		return err
	}
	return s.appendChunk(ch)
}

// appendChunk adds a chunk's kept rows to the outbox at its high
// watermark's COMMIT, after every change before it. The watermark's
// transaction holds nothing else, so the batches the rows fill are sealed
// at the usual bounds (BATCH_MAX_ROWS, BATCH_MAX_BYTES) as between source
// transactions; only the last one carries the COMMIT's position.
func (s *stream) appendChunk(ch *incremental.Chunk) error {
	s.pipe.EndChunk()
	route := ch.Table.Rel.Target.Route
	now := time.Now()
	f := s.pipe.Filling()
	if f.Total == 0 && len(ch.Ends) > 0 && len(ch.Ends) <= s.c.cfg.BatchMaxRows && len(ch.Buf) <= s.c.cfg.BatchMaxBytes {
		// The chunk is one batch: its buffer becomes the batch's (no copy),
		// and the batch's empty one goes back to the pool with the chunk.
		f.Bufs[route], ch.Buf = ch.Buf, f.Bufs[route][:0]
		f.AddedChunk(route, len(ch.Ends), now)
	} else if err := s.copyChunk(ch, route, now); err != nil {
		return err
	}
	if f := s.pipe.Filling(); ch.Done && f.Total > 0 {
		f.SealNow = true
	}
	return s.inc.Appended(ch)
}

// copyChunk copies a chunk's rows into the outbox, sealing batches at
// their bounds: each batch takes, in one copy, the lines up to the one
// that reaches BATCH_MAX_ROWS or BATCH_MAX_BYTES (as the stream seals a
// batch after the change that reached a bound).
func (s *stream) copyChunk(ch *incremental.Chunk, route int, now time.Time) error {
	maxRows, maxBytes := s.c.cfg.BatchMaxRows, s.c.cfg.BatchMaxBytes
	for i, start := 0, 0; i < len(ch.Ends); {
		if s.pipe.Full() {
			for !s.pipe.CanPost() {
				if err := s.waitEvent(); err != nil {
					return err
				}
			}
			s.pipe.Seal(false)
		}
		b := s.pipe.Filling()
		rows, size := b.Total, b.Size()
		j := i
		for j < len(ch.Ends)-1 && rows+j-i+1 < maxRows && size+ch.Ends[j]-start < maxBytes {
			j++
		}
		end := ch.Ends[j]
		b.Bufs[route] = append(b.Bufs[route], ch.Buf[start:end]...)
		b.AddedChunk(route, j-i+1, now)
		i, start = j+1, end
	}
	return nil
}

// relationShape hands a RELATION to the incremental snapshot, which
// reads the table again when its shape changed (incremental.Session.Shape).
func (s *stream) relationShape(rel *decode.Rel) error {
	if s.inc == nil {
		return nil // no state file: nothing was read under a known shape
	}
	return s.inc.Shape(rel, s.received)
}

// saveChunks records in the state each chunk the acknowledged position
// passed (incremental.Session.Save).
func (s *stream) saveChunks(force bool) error { return s.inc.Save(s.c.acked, force) }

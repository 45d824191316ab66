package connector

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// batch is one outbox batch: per-route NDJSON buffers filled as changes
// arrive, and the position a flush of it may acknowledge.
type batch struct {
	kind  int // batchStream, batchSnapshot or batchRetract: which crash points it passes
	seq   int
	bufs  [][]byte // indexed by route
	rows  []int    // rows per route
	total int
	first time.Time // arrival of the oldest buffered row: the linger deadline counts from it
	// ackTo is the end LSN of the last COMMIT seen while this batch was
	// filling. Every row of that transaction is in this batch or an earlier
	// one, so once this batch and all before it are complete, ackTo is safe.
	ackTo pglogrepl.LSN
	// multi: the batch holds a whole source transaction of more than one
	// record (a key-changing UPDATE is two), which Feldera may feed to
	// its views over several steps unless it is inside a Feldera
	// transaction (delivery/txn.go).
	multi bool
	// sealNow: a table's (or a lane's) last chunk is in the batch. No
	// more rows of the read are coming to fill it, and the read is done
	// only once they are complete in Feldera, so the batch is sent as
	// soon as it may be, not at the linger deadline.
	sealNow bool
}

// Batch kinds.
const (
	batchStream = iota
	batchSnapshot
	batchRetract
)

func newBatch(routes int) *batch {
	return &batch{bufs: make([][]byte, routes), rows: make([]int, routes)}
}

// size is the NDJSON the batch holds, in bytes.
func (b *batch) size() int {
	n := 0
	for _, buf := range b.bufs {
		n += len(buf)
	}
	return n
}

// full reports whether b reached BATCH_MAX_ROWS or BATCH_MAX_BYTES: it is
// sealed after the change that reached the bound, so a row larger than
// the byte bound goes alone.
func (c *Connector) full(b *batch) bool {
	return b.total >= c.cfg.BatchMaxRows || b.total > 0 && b.size() >= c.cfg.BatchMaxBytes
}

// tables is how many routes have rows in b.
func (b *batch) tables() int {
	n := 0
	for _, r := range b.rows {
		if r > 0 {
			n++
		}
	}
	return n
}

// Buffer gives the decoder the route's buffer to append lines to.
func (b *batch) Buffer(route int) *[]byte { return &b.bufs[route] }

func (b *batch) added(route, n int, now time.Time) {
	if n == 0 {
		return
	}
	if b.total == 0 {
		b.first = now
	}
	b.rows[route] += n
	b.total += n
}

// reset empties the batch for reuse, keeping buffer capacity.
func (b *batch) reset(seq int) {
	for i := range b.bufs {
		b.bufs[i] = b.bufs[i][:0]
		b.rows[i] = 0
	}
	b.total, b.ackTo, b.seq, b.first, b.sealNow, b.multi = 0, 0, seq, time.Time{}, false, false
}

// shrink drops buffers that grew far past what a batch needs, so one huge
// row does not pin memory forever.
func (b *batch) shrink(limit int) {
	for i := range b.bufs {
		if cap(b.bufs[i]) > limit {
			b.bufs[i] = nil
		}
	}
}

package delivery

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// Batch is one outbox batch: per-route NDJSON buffers filled as changes
// arrive, and the position a flush of it may acknowledge.
type Batch struct {
	Seq  int
	Bufs [][]byte // indexed by route
	Rows []int    // rows per route
	// Chunked says, per route, that an incremental snapshot's chunk
	// rows are in the batch: a replay reads them again differently, so
	// a Feldera transaction stops counting the route's table
	// (delivery.Transactions.Uncount).
	Chunked []bool
	Total   int
	First   time.Time // arrival of the oldest buffered row: the linger deadline counts from it
	// AckTo is the end LSN of the last COMMIT seen while this batch was
	// filling. Every row of that transaction is in this batch or an earlier
	// one, so once this batch and all before it are complete, AckTo is safe.
	AckTo pglogrepl.LSN
	// Progress is, in a batch that ends a Feldera transaction, the last
	// COMMIT the transaction carries (its batches' highest AckTo): what
	// its progress row records (0: none).
	Progress pglogrepl.LSN
	// Through bounds the WAL positions of its changes (Pipeline.Sealed):
	// recorded with the Feldera transaction it goes into, before its
	// POSTs (Transactions.Through).
	Through pglogrepl.LSN
	// Multi: the batch holds a whole source transaction of more than one
	// record (a key-changing UPDATE is two), which Feldera may feed to
	// its views over several steps unless it is inside a Feldera
	// transaction (delivery/txn.go).
	Multi bool
	// SealNow: a table's (or a lane's) last chunk is in the batch. No
	// more rows of the read are coming to fill it, and the read is done
	// only once they are complete in Feldera, so the batch is sent as
	// soon as it may be, not at the linger deadline.
	SealNow bool
}

// NewBatch returns an empty batch for routes routes.
func NewBatch(routes int) *Batch {
	return &Batch{Bufs: make([][]byte, routes), Rows: make([]int, routes), Chunked: make([]bool, routes)}
}

// Size is the NDJSON the batch holds, in bytes.
func (b *Batch) Size() int {
	n := 0
	for _, buf := range b.Bufs {
		n += len(buf)
	}
	return n
}

// Bounds are a batch's bounds: BATCH_MAX_ROWS and BATCH_MAX_BYTES.
type Bounds struct{ Rows, Bytes int }

// Full reports whether b reached BATCH_MAX_ROWS or BATCH_MAX_BYTES: it is
// sealed after the change that reached the bound, so a row larger than
// the byte bound goes alone.
func (l Bounds) Full(b *Batch) bool {
	return b.Total >= l.Rows || b.Total > 0 && b.Size() >= l.Bytes
}

// Tables is how many routes have rows in b.
func (b *Batch) Tables() int {
	n := 0
	for _, r := range b.Rows {
		if r > 0 {
			n++
		}
	}
	return n
}

// Buffer gives the decoder the route's buffer to append lines to.
func (b *Batch) Buffer(route int) *[]byte { return &b.Bufs[route] }

// Added counts n rows appended to route's buffer at now.
func (b *Batch) Added(route, n int, now time.Time) {
	if n == 0 {
		return
	}
	if b.Total == 0 {
		b.First = now
	}
	b.Rows[route] += n
	b.Total += n
}

// AddedChunk records n rows of an incremental snapshot's chunk added to
// route's buffer (Chunked).
func (b *Batch) AddedChunk(route, n int, now time.Time) {
	b.Chunked[route] = true
	b.Added(route, n, now)
}

// Reset empties the batch for reuse, keeping buffer capacity.
func (b *Batch) Reset(seq int) {
	for i := range b.Bufs {
		b.Bufs[i] = b.Bufs[i][:0]
		b.Rows[i] = 0
		b.Chunked[i] = false
	}
	b.Total, b.AckTo, b.Progress, b.Seq, b.First, b.SealNow, b.Multi = 0, 0, 0, seq, time.Time{}, false, false
	b.Through = 0
}

// Shrink drops buffers that grew far past what a batch needs, so one huge
// row does not pin memory forever.
func (b *Batch) Shrink(limit int) {
	for i := range b.Bufs {
		if cap(b.Bufs[i]) > limit {
			b.Bufs[i] = nil
		}
	}
}

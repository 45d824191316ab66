// Package incremental reads tables in chunks while the stream runs
// (SNAPSHOT_MODE=incremental and resnapshot requests): each chunk in its
// own short REPEATABLE READ transaction between a low and a high
// watermark written into the stream, reconciled with the stream's changes
// between them (the exactness argument is in snapshot/chunk.go).
//
//   - Worker reads the queued tables, in lanes of block or key ranges,
//     and the retraction batches of a resnapshot; it hands each chunk to
//     the stream loop through the Handoff and writes its watermarks.
//   - Loop is the stream loop's rule, free of I/O: the xip rule, each
//     chunk's window, what a chunk keeps at its high watermark, and when
//     each chunk may be recorded.
//   - Recorder records the chunks the acknowledged position passed in the
//     state file.
//
// Goroutines: the session starts Worker.Run on a goroutine of its own and
// joins it; Run starts the lane readers of a table and joins them before
// it moves on. The Handoff is the only state the worker and the loop
// share, and is safe for concurrent use (a handed chunk's contents cross
// through it); a Loop and a Recorder belong to the stream loop's
// goroutine.
package incremental

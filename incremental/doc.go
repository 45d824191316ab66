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
//   - Session is the stream loop's side: it holds the tables the state
//     file leaves incremental and those resnapshot requests add while the
//     session streams. The stream loop calls it at each decoded event
//     (Event, and Shape at a RELATION), where it feeds the Loop, handles
//     the watermarks and the requests, and at a high watermark's COMMIT
//     returns the chunk whose rows the stream appends to its batches
//     (then Appended); at each tend and at shutdown (Save), to record
//     the chunks the acknowledged position passed; and at a new
//     checkpoint (Checkpoint). The stream's batches stay the stream's.
//     Connect opens the connections that read chunks; Prepare and Spare
//     keep the one startup opened for the session's first worker.
//
// Goroutines: Start, and a resnapshot request while the session streams,
// start the Worker on a goroutine counted in the WaitGroup the stream
// gives (Stream.WG), which the stream joins; the worker ends with the
// stream's context and reports its error through Stream.Fail. Run starts
// the lane readers of a table and joins them before it moves on. The
// Handoff is the only state the worker and the loop share, and is safe
// for concurrent use; a Session, a Loop, a Recorder and a Spare belong
// to the stream loop's goroutine.
package incremental

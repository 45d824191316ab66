// Package incsession is the stream loop's side of a session's
// incremental snapshots (SNAPSHOT_MODE=incremental) and resnapshot
// requests: a Session holds the tables the state file leaves
// incremental and those requests add while the session streams, and the
// stream loop calls it
//
//   - at each decoded event (Event, and Shape at a RELATION): it feeds the
//     chunk rule (incremental.Loop), handles the watermarks and the
//     resnapshot requests, and at a high watermark's COMMIT returns the
//     chunk whose rows the stream appends to its outbox (then Appended);
//   - at each tend and at shutdown (Save), to record in the state file the
//     chunks the acknowledged position passed;
//   - at a new checkpoint (Checkpoint), to record it in the state file.
//
// The stream's outbox stays the stream's: the package never touches it.
// Connect opens the connections that read chunks; Prepare and Spare keep
// the one startup opened for the session's first worker.
//
// Goroutines: Start, and a resnapshot request while the session streams,
// start the incremental.Worker on a goroutine counted in the WaitGroup
// the stream gives (Stream.WG), which the stream joins; the worker ends
// with the stream's context, and reports its error through Stream.Fail.
// A Session belongs to the stream loop's goroutine and is not safe for
// concurrent use; what it shares with the worker is the
// incremental.Handoff (Handoff), which is. A Spare is not safe for
// concurrent use.
package incsession

// Package connector runs the replication session: it owns the replication
// connection and the LSN positions, feeds decoded rows into a bounded
// outbox, flushes the outbox to a Sink (Feldera), waits for completion, and
// only then advances flush_lsn. It reconnects with backoff and shuts down
// gracefully. It declares the Sink it needs; *feldera.Client satisfies it.
//
// # Goroutines
//
// Run is the supervisor and runs on its caller's goroutine; it returns
// only after every goroutine below has ended. Each session runs on that
// goroutine too, and its loop (stream.run) is the only one that touches
// the replication connection, the session's positions and its ledger
// (delivery.Ledger: the only writer of the acknowledged position).
// stream.serve starts, and joins before it returns:
//
//   - the completer (delivery.Completer), which polls the completion of the
//     batches in flight and reports each as an event;
//   - one poster at a time (flush.go, startFlush), which POSTs a sealed
//     batch and hands it to the completer;
//   - one retraction at a time (loop.go, truncate), for a TRUNCATE;
//   - the incremental snapshot's worker (incremental.Worker, started by
//     incremental.Session), and the lane readers it starts and joins
//     itself; it hands chunks to the loop through the incremental.Handoff;
//   - the pipeline watcher (delivery.Watcher), which reads /stats and
//     /checkpoints and reports a restart or a new checkpoint.
//
// They report to the loop by events (a buffered channel whose sends never
// block, see newStream; a completion's or a retraction's step reaches the
// ledger in its event) and through delivery.Checkpoints (the newest
// checkpoint's steps and the checkpoint waits). A failure in any of them
// ends the session; the next one replays from the slot. A graceful stop
// drains what is in flight, up to STOP_TIMEOUT.
//
// Connector's exported methods (Stats, Ready, Gate, Tables, CheckpointWait
// and the like) are safe for concurrent use with Run; Run itself is
// called once.
package connector

// Package connector runs the replication session: it owns the replication
// connection and the positions it reads, decodes the stream into the
// session's delivery.Pipeline, and advances flush_lsn only where the
// pipeline's Ledger says Feldera holds the rows durably. It reconnects with backoff
// and shuts down gracefully. It declares the Sink it needs;
// *feldera.Client satisfies it.
//
// # Settings and reports
//
// Config is the plain struct New takes (cmd/pgfeldera fills it from flags
// and the environment), with its DefaultXxx constants, the values of its
// modes (ack, snapshot, FELDERA_TRANSACTIONS, PG_SLOT_FAILOVER) and
// WithDefaults, which checks the required settings and fills in the
// others (config.go, configprogress.go). Observer is what the connector
// reports to the metrics; its methods may be called from several
// goroutines. Inspect gives `pgfeldera check` and `verify` the startup
// checks a run would make, without a connector.
//
// Why a session ended (CauseOf) is read from the kind of its error, never
// its text; the causes are the cause label of pgfeldera_reconnects_total
// (cause.go). The stages of a source transaction's way to the slot's
// acknowledgement (sent, complete, durable, acked), and the StageClock
// that times each transaction to each, are the stage label of
// pgfeldera_stage_seconds and of `pgfeldera status` (stage.go).
//
// # A session's opening
//
// A Starter is where a session starts, between "a replication connection
// is open" and "the slot's confirmed position is known and the tables are
// seeded": OpenReplication (startconn.go); Begin, which reads which
// server this is and the failover preflight, decides the startup plan
// (snapshot.Decide, what a restart restored, setup.Reconcile), runs the
// snapshot, resnapshot or incremental start it needs, records the server
// in the state file and reads the slot's confirmed position (starter.go,
// decide.go, startsnapshot.go, startincremental.go, startprogress.go);
// and StartReplication, which ends a walsender the last session left and
// starts streaming (startconn.go). Begin returns what it found; the
// session applies it.
//
// # Goroutines
//
// Run is the supervisor and runs on its caller's goroutine; it returns
// only after every goroutine below has ended. Each session runs on that
// goroutine too, and its loop (stream.run) is the only one that touches
// the replication connection, the session's positions and its pipeline
// (delivery.Pipeline, whose Ledger is the only writer of the acknowledged
// position). stream.serve starts, and joins before it returns:
//
//   - through the pipeline: the completer (delivery.Completer), which
//     polls the completion of the batches in flight and reports each as
//     an event; one poster at a time, which POSTs a sealed batch and
//     hands it to the completer; one retraction at a time, for a
//     TRUNCATE (loop.go, truncate);
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
// A Starter and a StageClock run on the session's goroutine and are not
// safe for concurrent use. Connector's exported methods (Stats, Ready,
// Gate, Tables, CheckpointWait and the like) are safe for concurrent use
// with Run; Run itself is called once.
package connector

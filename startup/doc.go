// Package startup is where a session starts, between "a replication
// connection is open" and "the slot's confirmed position is known and
// the tables are seeded". The Connector builds a Starter per session,
// with the configuration it reads, the facts it knows (the last
// acknowledgement, the highest position sent, whether the last session
// ended silent) and the loader, watcher and marks the start uses, and
// calls
//
//   - OpenReplication, to open the replication connection with the
//     settings every session pins (conn.go);
//   - Begin: which server this is and the failover preflight, the startup
//     plan's decision (snapshot.Decide, what a restart restored,
//     setup.Reconcile), the snapshot, resnapshot or incremental start it
//     needs, the server recorded in the state file, and the slot's
//     confirmed position (starter.go, decide.go, snapshot.go,
//     incremental.go);
//   - StartReplication, to end a walsender the last session left and
//     start streaming from the slot (conn.go).
//
// Begin returns what it found (Started: the server, the slot's confirmed
// position, the connection for chunks an incremental start opened); the
// Connector applies it, and is the only writer of its acknowledged
// position. The gate a journal gap moved is published through
// PublishGate. Errors of the replication connection's I/O are marked
// as Postgres's (cause.FromPostgres).
//
// Goroutines: none. Every call runs on the session's goroutine; the
// loader's copy runs there too. A Starter is not safe for concurrent use.
// What it shares with other goroutines is atomic: the step watermark it
// reads (Step), the health marks it sets (Snapshotting, Progress), the
// checkpoints it reads (CP).
package startup

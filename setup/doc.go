// Package setup is the look at every prerequisite before a session
// streams, and the Plan it yields: wal_level and the WAL limits, the
// publication and its tables, each mapped table's replica identity,
// columns and decoding plan against its Feldera table, and the Feldera
// pipeline's status, program and fault-tolerance model. Every refusal
// found is collected (Found) and reported at once (Problems), so that a
// user fixes a new database in one pass; `pgfeldera check` shows the same
// list.
//
// At a start that streams from the slot, Reconcile holds the state file
// against what a restarted Feldera restored (RestoredEnough), tables
// whose definition changed (Fingerprint) and partitions that moved, and
// decides which tables are read again. ChooseGate picks the ack gate
// from the pipeline's fault-tolerance model and tries POST /checkpoint
// once. While a session streams, a PartitionWatch looks for partitions
// attached or detached.
//
// It starts no goroutines. Prepare opens its own Postgres connection and
// closes it before it returns. A PartitionWatch keeps a connection of its
// own until Close and belongs to the goroutine that calls it (the
// session's pipeline watcher, joined before Close). A Plan is read-only
// once built, except for the fields the session fills (Gate, Incarnation,
// Keys, and ChooseGate's checkpoints) before its goroutines start.
package setup

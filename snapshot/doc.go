// Package snapshot is the copy of whole tables, and the retraction of
// what Feldera holds that Postgres no longer has:
//
//   - the exported snapshot: the replication slot created with one, and
//     the REPEATABLE READ transaction that reads under it (copy.go);
//   - Decide, the startup plan from the state file and the slot
//     (plan.go);
//   - the chunk queries of an incremental snapshot and the exactness
//     argument for reading a table in chunks while the stream runs
//     (chunk.go), and the key queries a retraction needs (keys.go);
//   - Loader.CopyAll, which copies every table under the snapshot the
//     new slot exported, through the decoder into delivery batches, each
//     flushed and waited for, or all inside one Feldera transaction
//     (SNAPSHOT_TRANSACTION); on a resnapshot it retracts what an earlier
//     attempt left, and cross-checks each keyed table's count
//     (copyall.go);
//   - Loader.RetractAll, which deletes every row Feldera holds for a
//     table (TRUNCATE, a keyless table before a resnapshot), in batches,
//     each waited for (retract.go);
//   - Loader.SpoolQuery, which spools the rows of a fenced ad-hoc query
//     to a file beside the state file, for the retractions here and the
//     incremental snapshot's (spool.go, spoolfile.go).
//
// The state file and the slot around the copy stay in the connector,
// which builds one Loader and keeps it. Batches go through its
// delivery.Sender; the counters it updates are the connector's.
//
// Goroutines: none. CopyAll runs alone (at startup, before any session);
// a RetractAll runs while the session's poster is idle (the stream loop
// sends nothing while a retraction runs). SpoolQuery is safe for
// concurrent use: the incremental snapshot's worker calls it from its own
// goroutine.
package snapshot

// Package load copies tables into Feldera and retracts from Feldera what
// Postgres no longer has, for the connector's snapshot and its TRUNCATE:
//
//   - Loader.CopyAll copies every table under the snapshot the new slot
//     exported, through the decoder into outbox batches, each flushed and
//     waited for, or all inside one Feldera transaction
//     (SNAPSHOT_TRANSACTION); on a resnapshot it retracts what an earlier
//     attempt left, and cross-checks each keyed table's count (copy.go);
//   - Loader.RetractAll deletes every row Feldera holds for a table
//     (TRUNCATE, a keyless table before a resnapshot); the retractor
//     sends the deletes in batches, each waited for (retract.go);
//   - Loader.SpoolQuery spools the rows of a fenced ad-hoc query to a
//     file beside the state file, for the retractions here and the
//     incremental snapshot's (spool.go).
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
package load

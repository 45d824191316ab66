// Package failover checks a session's server for failover.
// Since PostgreSQL 17 a logical slot created with FAILOVER is
// synchronized to a physical standby that runs with
// sync_replication_slots, and survives the standby's promotion. Two
// things make that safe for Feldera:
//
//   - synchronized_standby_slots on the primary, listing the standby's
//     physical slot: the primary then sends a logical walsender nothing
//     the standby has not flushed. Without it, pgfeldera can deliver a
//     transaction the standby never received; after a failover Feldera
//     holds rows the new primary never had (phantom rows), and the stream
//     cannot retract them.
//   - every session checks which server it reached: the system identifier
//     (another cluster takes the resnapshot path) and the timeline. On a
//     new timeline, the timeline history gives the position where the old
//     one forked; if this process sent Feldera anything past it, Feldera
//     may hold phantom rows, and the resnapshot path is taken, saying why.
//
// It starts no goroutines and keeps no state between calls.
package failover

// Package connector runs the replication session: it owns the replication
// connection and the LSN positions, feeds decoded rows into a bounded
// outbox, flushes the outbox to a Sink (Feldera), waits for completion, and
// only then advances flush_lsn. It reconnects with backoff and shuts down
// gracefully. It declares the Sink it needs; *feldera.Client satisfies it.
package connector

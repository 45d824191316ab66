// Package delivery holds what decides, free of I/O, when rows sent to
// Feldera are safe: the gate (completion, or a checkpoint under
// at_least_once), the frontier that orders batches and finds their
// durable prefix, and the Ledger, a session's only writer of the
// acknowledged position, which adds the rules the replication stream
// teaches (a COMMIT waits for the batch that carries it, a quiet
// keepalive releases idle WAL, accepted mode, exactly_once's looks).
//
// It also holds the ingress fence (Fence), which keeps a late copy of old
// rows from landing after newer ones, across processes through the fence
// file.
//
// It starts no goroutines. A Ledger belongs to the session goroutine that
// made it and is not safe for concurrent use; a Fence is.
package delivery

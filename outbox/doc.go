// Package outbox holds the batches the connector fills and how a batch
// is sent to Feldera:
//
//   - Batch, one outbox batch: per-route NDJSON buffers and the position
//     a flush of it may acknowledge; Bounds, BATCH_MAX_ROWS and
//     BATCH_MAX_BYTES, which say when it is full;
//   - PlanTxn, what a batch does about Feldera transactions
//     (FELDERA_TRANSACTIONS, txn.go).
//
// It starts no goroutines. A Batch belongs to one goroutine at a time
// (the stream loop fills it, the poster sends it, the event that ends the
// POST hands it back) and is not safe for concurrent use.
package outbox

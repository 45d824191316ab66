// Package outbox holds the batches the connector fills and how a batch
// is sent to Feldera:
//
//   - Batch, one outbox batch: per-route NDJSON buffers and the position
//     a flush of it may acknowledge; Bounds, BATCH_MAX_ROWS and
//     BATCH_MAX_BYTES, which say when it is full;
//   - PlanTxn, what a batch does about Feldera transactions
//     (FELDERA_TRANSACTIONS, txn.go);
//   - Sender, which sends a batch through the ingress fence under its
//     plan: Send for the stream's poster (no wait for completion; the
//     session's delivery.Completer polls the tokens), Flush for the
//     snapshot and the retractions (waits for completion), and Query,
//     the fenced ad-hoc query.
//
// A Sender declares what it needs of Feldera (Sink) and of the metrics
// (Observer); *feldera.Client and the connector's Observer satisfy them.
//
// Goroutines: none. A Sender's Send, Flush and AbandonTxn are used by one
// goroutine at a time (the stream's poster, or the session, the snapshot
// or a retraction between posters), as the delivery.Transactions they
// drive requires; WaitFence and Query touch only the Fence and the Sink,
// and are safe for concurrent use (the incremental snapshot's worker
// spools through Query while the poster sends). The counters it updates
// are atomics. A Batch belongs to one
// goroutine at a time (the stream loop fills it, the poster sends it, the
// event that ends the POST hands it back) and is not safe for concurrent
// use.
package outbox

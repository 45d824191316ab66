// Package delivery holds everything between a sealed batch and rows that
// are safe in Feldera, apart from the session that drives it:
//
//   - the gate (completion, or a checkpoint under at_least_once), the
//     frontier that orders batches and finds their durable prefix, and
//     the Ledger, a session's only writer of the acknowledged position,
//     which adds the rules the replication stream teaches (a COMMIT waits
//     for the batch that carries it, a quiet keepalive releases idle WAL,
//     accepted mode, exactly_once's looks). Free of I/O, with a table test
//     per rule;
//   - the ingress Fence, which keeps a late copy of old rows from landing
//     after newer ones, across processes through the fence file;
//   - the Completer, which polls the completion tokens of the batches in
//     flight;
//   - Transactions, the Feldera transaction protocol (txn.go; what /stats
//     says of a transaction is internal/txnview);
//   - the Watcher, which watches the pipeline while a session streams
//     (restarts, redeploys, checkpoints, asking for one when completed
//     work waited), and waits for a checkpoint to cover a step.
//
// Each part declares the small interface it needs of Feldera (Ingester,
// Poller, TxnAPI, WatchAPI, Observer); *feldera.Client satisfies them
// all.
//
// Goroutines: the session starts Completer.Run and joins it; Watcher.Start
// starts one goroutine, counted in the WaitGroup it is given, which the
// session waits for. A Ledger belongs to the session goroutine and is not safe for
// concurrent use; Transactions is used by one goroutine at a time (the
// poster, or the session between posters) except its Clock; a Fence, a
// TxnClock and Checkpoints are safe for concurrent use.
package delivery

// Package delivery is the sending side: everything from a row leaving
// the decoder to "durable in Feldera", apart from the replication
// session that feeds it.
//
//   - Pipeline, a session's sending side whole: it seals the filling
//     batch (seal.go), posts one batch at a time, keeps the batches in
//     flight within Feldera's buffer, starts the completer, holds a
//     Feldera transaction open across batches or joins the one a crash
//     left, skips what the progress row says Feldera holds, and alone
//     feeds the Ledger (feed.go). The session tells it what the stream
//     says (Begin, Rows, Commit, Keepalive) and applies its events;
//   - Batch, the buffers a session fills: per-route NDJSON and the
//     position a flush of it may acknowledge; Bounds, BATCH_MAX_ROWS and
//     BATCH_MAX_BYTES, which say when it is full;
//   - PlanTxn, what a batch does about Feldera transactions
//     (FELDERA_TRANSACTIONS, txnplan.go), and Transactions, the Feldera
//     transaction protocol (txn.go; what /stats says of a transaction is
//     internal/txnview), with the join of one left open and the count of
//     what its endpoints took (taken.go, txncount.go);
//   - Sender, which sends a batch through the ingress Fence under its
//     plan: Send for the stream's poster (no wait for completion), Flush
//     for the snapshot and the retractions (waits for completion), and
//     Query, the fenced ad-hoc query; the progress row (progress.go) and
//     ProgressSkip, which skips the source transactions the row says
//     Feldera holds;
//   - the ingress Fence, which keeps a late copy of old rows from landing
//     after newer ones, across processes through the fence file;
//   - the Completer, which polls the completion tokens of the batches in
//     flight;
//   - the gate (completion, or a checkpoint under at_least_once), the
//     frontier that orders batches and finds their durable prefix, and
//     the Ledger, a session's only writer of the acknowledged position,
//     which adds the rules the replication stream teaches (a COMMIT waits
//     for the batch that carries it, a quiet keepalive releases idle WAL,
//     accepted mode, exactly_once's looks). Free of I/O, with a table test
//     per rule;
//   - the Watcher, which watches the pipeline while a session streams
//     (restarts, redeploys, checkpoints, asking for one when completed
//     work waited), and waits for a checkpoint to cover a step.
//
// Each part declares the small interface it needs of Feldera (Sink,
// Ingester, Poller, TxnAPI, WatchAPI) and of the metrics (Observer);
// *feldera.Client and the connector's Observer satisfy them.
//
// Goroutines: Pipeline.Start starts the completer, Pipeline.Seal one
// poster at a time and Pipeline.Retract one retraction at a time;
// Pipeline.Wait joins them, and the session calls it before it returns.
// A Pipeline belongs to the session loop's goroutine. Watcher.Start
// starts one goroutine, counted in the WaitGroup it is given, which the
// session waits for. A Ledger belongs to its Pipeline and is not safe
// for concurrent use. A Sender's Send, Flush and AbandonTxn, and the
// Transactions they drive, are used by one goroutine at a time (the
// stream's poster, or the session, the snapshot or a retraction between
// posters), except the Transactions' Clock; WaitFence and Query touch
// only the Fence and the Sink and are safe for concurrent use (the
// incremental snapshot's worker spools through Query while the poster
// sends). A Batch belongs to one goroutine at a time (the stream loop
// fills it, the poster sends it, the event that ends the POST hands it
// back). A Fence, a TxnClock and Checkpoints are safe for concurrent use.
package delivery

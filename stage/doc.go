// Package stage names the steps of a source transaction's way from its
// COMMIT in Postgres to the slot's acknowledgement (sent, complete,
// durable, acked) and times each transaction to each of them (Clock), a
// rule free of I/O. The names are the stage label of the metric
// pgfeldera_stage_seconds and of `pgfeldera status`.
//
// It starts no goroutines. A Clock belongs to the session's loop and is
// not safe for concurrent use; Names and Stage's String are.
package stage

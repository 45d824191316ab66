// Package cause says why a replication session ended (Of), by the kind
// of its error, never by its text: a timeout waiting for Feldera, Feldera,
// Postgres, or other. The causes are the cause label of the metric
// pgfeldera_reconnects_total. FromPostgres and FromFeldera mark an error
// with its side where its type does not say it; ErrStreamEnded is the end
// of the replication stream.
//
// It starts no goroutines and keeps no state; everything in it is safe
// for concurrent use.
package cause

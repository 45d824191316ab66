// Package replconn is pgfeldera's side of the PostgreSQL replication
// protocol: how every connection to Postgres is dialed, the logical
// replication connection's settings, the Standby Status Update with its
// three positions explicit, the stream's heartbeat rule (Liveness, free of
// I/O) and the error that ends a silent session, the server's version and
// timeline history, and the queries of the slot, each beside its parser.
//
// It starts no goroutines. A *pgconn.PgConn is not safe for concurrent
// use: the goroutine that opened a replication connection owns it, and is
// the only one that sends a status on it; a Liveness belongs to that
// goroutine too.
package replconn

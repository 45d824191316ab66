// Package inspect is the read-only look at both sides that `pgfeldera
// check`, `pgfeldera verify` and the demo run, built on the startup checks
// (setup) without a session:
//
//   - Check collects every problem that would stop a run (setup.Prepare's
//     and those only a run's later steps would find: the replication
//     connection, the slot, the state file's directory and lock) and says
//     what a run would do (the fault-tolerance model and the ack gate).
//   - Verify compares each mapped table in Postgres and in Feldera: row
//     counts and an order-independent digest (package verify), and the
//     keys that differ.
//
// Neither changes anything: no slot is created, no checkpoint asked for,
// nothing sent to Feldera. Each declares the small interface it needs of
// Feldera (setup.Pipeliner, Querier); *feldera.Client satisfies them.
//
// It starts no goroutines. Each call opens its own Postgres connections
// and closes them before it returns; calls share nothing and may run
// concurrently, as far as the setup.Config's Options hook allows.
package inspect

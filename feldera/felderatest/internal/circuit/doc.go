// Package circuit is the Feldera double's model of a pipeline's circuit
// thread: the input each HTTP ingress endpoint queued, the steps that
// feed it (each endpoint up to a soft cap per step), how long a step
// takes, automatic per-step transactions, and API and connector
// transactions, whose commits run over several steps and feed no input.
// Records become visible only when a step ends with no transaction in
// progress: the circuit then hands them to its publish function, which
// applies them to the tables. circuit.go names the Feldera functions it
// follows. It also issues and reads the completion tokens that name an
// endpoint's records (token.go).
//
// It starts no goroutines and keeps no clock: Advance(now) plays the
// steps that would have run by now, and the caller calls it before it
// reads or changes anything. A Circuit is not safe for concurrent use:
// the double's lock guards it, and publish runs under that lock.
package circuit

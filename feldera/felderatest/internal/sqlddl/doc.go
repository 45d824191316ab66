// Package sqlddl reads the Feldera double's pipeline program: the CREATE
// TABLE statements of a small subset of Feldera's SQL, into the
// feldera.Relation values the double serves (felderatest.ParseDDL). It
// knows nothing of HTTP. It starts no goroutines; Parse keeps no state
// and is safe for concurrent use.
package sqlddl

// Package pgvalue maps Postgres types to Feldera column types and turns a
// Postgres value in text form into Feldera's JSON for it. Plan chooses the
// encoder for a (Postgres type, typmod, Feldera type) pair, or refuses the
// pair with a TypeError saying why; Suggest proposes the Feldera type that
// pgfeldera ddl prints; an Encoder checks one text value and appends its
// JSON, or returns an error (an Unrepresentable for a valid value the
// Feldera column cannot hold). It starts no goroutines. Its tables are
// fixed once the package is initialized, so Plan, Suggest, EncoderFor and
// TypeName are safe for concurrent use as long as the Types function they
// are given is, and an Encoder keeps no state between calls, so one
// encoder may be used by many goroutines at once.
package pgvalue

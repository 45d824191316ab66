// Package sqlvalue is the Feldera double's SQL values: it checks a JSON
// value against a Feldera column type, as Feldera's JSON input does in
// the default flavor, and returns the canonical form the double stores
// (Normalize), with the error texts Feldera gives. It knows nothing of
// HTTP or of tables. It starts no goroutines; its functions keep no state
// and are safe for concurrent use.
package sqlvalue

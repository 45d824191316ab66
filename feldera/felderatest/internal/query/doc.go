// Package query is the Feldera double's ad-hoc query evaluator: it reads
// the one form of query the double answers (SELECT cols|*|COUNT(*) FROM t
// [ORDER BY ...]), resolves its columns against a table's definition, and
// prints rows as Feldera's /query?format=json does, value by value in
// the text arrow_json gives each column's Arrow type. Looking the table
// up and answering the request is the double's (felderatest); this
// package knows nothing of HTTP. It starts no goroutines; its functions
// keep no state and are safe for concurrent use.
package query

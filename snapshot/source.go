package snapshot

import "github.com/pgfeldera/pgfeldera/decode"

// SourceOf is how a target's rows are read from Postgres: its table, the
// publication's row filter, or the query that stands in for it.
func SourceOf(t *decode.Target) Source {
	return Source{Table: t.Source(), Filter: t.Filter, Query: t.Query}
}

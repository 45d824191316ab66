package catalog

import "github.com/pgfeldera/pgfeldera/decode"

// Mapping is the source's half of a session's plan: each mapped
// Postgres table with its columns, and the Feldera tables (routes) they
// feed. It is built once before a session streams and not changed after.
type Mapping struct {
	Targets []*decode.Target
	Rels    []*decode.Rel    // per target: the catalog's columns, for COPY
	Leaves  [][]string       // per target: a partitioned table's leaves (nil for any other table)
	Routes  []*decode.Target // per route: its first target, whose Dest is the route's Feldera table
	Groups  [][]int          // per route: the indexes of its targets (several for leaf partitions sharing a table)
	Keys    []Key            // per target: its key for an incremental snapshot, read once (nil until read)
}

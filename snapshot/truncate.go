package snapshot

import (
	"fmt"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// TruncatedRoutes is the first truncated source of each Feldera table a
// TRUNCATE message empties (it lists each relation once). Leaf partitions
// sharing a Feldera table (groups, per route): a TRUNCATE of all of them
// (of their root) empties the table; a TRUNCATE of only some cannot be
// retracted, because Feldera cannot tell which of its rows came from
// which leaf. That is refused rather than guessed.
func TruncatedRoutes(rels []*decode.Rel, groups [][]int) ([]*decode.Rel, error) {
	perRoute := map[int]int{}
	var once []*decode.Rel
	for _, r := range rels {
		if perRoute[r.Target.Route]++; perRoute[r.Target.Route] == 1 {
			once = append(once, r)
		}
	}
	for _, r := range rels {
		if n := len(groups[r.Target.Route]); perRoute[r.Target.Route] < n {
			return nil, fatal.Wrap(fmt.Errorf("TRUNCATE of %s, one of %d partitions that share Feldera table %s: pgfeldera cannot retract only that partition's rows: resnapshot the table (pgfeldera resnapshot with its partitions), and TRUNCATE the partitioned table rather than one partition",
				r.Target.Qualified(), n, r.Target.Dest.Name))
		}
	}
	return once, nil
}

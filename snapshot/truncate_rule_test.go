package snapshot

import (
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// A TRUNCATE empties a Feldera table only when it truncates every source
// of it: all leaves that share it, or its one table. A TRUNCATE of some of
// the leaves is refused, naming the partition.
func TestTruncatedRoutes(t *testing.T) {
	rel := func(name string, route int, dest string) *decode.Rel {
		return &decode.Rel{Target: &decode.Target{Schema: "public", Name: name, Route: route, Dest: feldera.Relation{Name: dest}}}
	}
	m1, m2, u := rel("m_1", 0, "m"), rel("m_2", 0, "m"), rel("users", 1, "users")
	groups := [][]int{{0, 1}, {2}}
	for _, c := range []struct {
		name    string
		rels    []*decode.Rel
		want    []*decode.Rel
		refused string
	}{
		{"one table", []*decode.Rel{u}, []*decode.Rel{u}, ""},
		{"every leaf of a shared table, once", []*decode.Rel{m1, m2}, []*decode.Rel{m1}, ""},
		{"every leaf and another table", []*decode.Rel{m2, u, m1}, []*decode.Rel{m2, u}, ""},
		{"one leaf of two", []*decode.Rel{m1}, nil, `TRUNCATE of public.m_1, one of 2 partitions that share Feldera table m`},
		{"one leaf beside another table", []*decode.Rel{u, m2}, nil, `TRUNCATE of public.m_2`},
	} {
		got, err := TruncatedRoutes(c.rels, groups)
		if c.refused != "" {
			if err == nil || !fatal.Is(err) || !strings.Contains(err.Error(), c.refused) {
				t.Errorf("%s: %v, want a fatal refusal naming %q", c.name, err, c.refused)
			}
			continue
		}
		if err != nil || len(got) != len(c.want) {
			t.Errorf("%s: %v %v", c.name, got, err)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: [%d] %s, want %s", c.name, i, got[i].Target.Name, c.want[i].Target.Name)
			}
		}
	}
}
